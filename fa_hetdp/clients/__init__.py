"""The Flower ``ClientApp`` of fa-hetdp: local statistics, noise share, encode, mask.

``fa_hetdp.clients.app:app`` is the ClientApp (one ``@app.query`` handler per protocol step);
``fa_hetdp.flowerkit.wire`` is the message format shared with :mod:`fa_hetdp.server`;
``fa_hetdp.dp.rng`` the noise generators (seeded in simulation, CSPRNG-backed in deployment).
"""
