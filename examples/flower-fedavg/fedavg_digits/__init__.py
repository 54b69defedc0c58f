"""FedAvg on the embedded digits with private heterogeneity measurements (fa-hetdp example)."""
