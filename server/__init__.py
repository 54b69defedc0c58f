"""The Flower ``ServerApp`` of fa-hetdp and the strategy that drives the protocol.

``server.app:app`` is the ServerApp; ``server.strategy`` holds the protocol logic (sampling,
thresholds, timeouts, releases, assembling and writing results) independent of Flower's
transport; ``server.certs`` makes development TLS certificates for a test deployment.
"""
