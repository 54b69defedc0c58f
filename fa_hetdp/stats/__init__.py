"""The heterogeneity statistics, computed exactly, and the table of statistics.

Mean, dispersion, weighted mean, Cochran's Q and I^2 (:mod:`fa_hetdp.stats.exact`) and the
registry every layer above reads (:mod:`fa_hetdp.stats.registry`). The errors of the private
estimates live one layer up, in :mod:`fa_hetdp.accuracy`.
"""
