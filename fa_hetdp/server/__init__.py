"""The Flower ``ServerApp`` of fa-hetdp and the strategy that drives the protocol.

``fa_hetdp.server.app:app`` is the ServerApp; ``fa_hetdp.server.strategy`` holds the protocol
logic (sampling, thresholds, timeouts, releases, assembling and writing results) independent of
Flower's transport; ``fa_hetdp.server.certs`` makes development TLS certificates for a test
deployment.
"""
