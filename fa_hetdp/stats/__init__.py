"""The heterogeneity statistics and the errors of their private estimates.

Mean, dispersion, weighted mean, Cochran's Q and I^2 computed exactly, and the error
metrics (EMSE, expected MSE, the paper's TMSE, intervals) of the private ones.
"""
