"""The Flower ``ClientApp`` of fa-hetdp: local statistics, noise share, encode, mask.

``clients.app:app`` is the ClientApp (one ``@app.query`` handler per protocol step);
``clients.wire`` is the message format shared with ``server/``; ``clients.csprng`` the noise
generators (seeded in simulation, CSPRNG-backed in deployment).
"""
