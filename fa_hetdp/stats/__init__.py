"""The heterogeneity statistics, computed exactly.

Mean, dispersion, weighted mean, Cochran's Q and I^2 (:mod:`fa_hetdp.stats.exact`), for every
statistic of the table :mod:`fa_hetdp.registry` (which sits on the foundation layer, so that
the configuration can name its keys). The intervals of a private result live in
:mod:`fa_hetdp.protocol.intervals`, its expected errors in :mod:`fa_hetdp.accuracy`.
"""
