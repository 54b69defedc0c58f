"""The accuracy of the private statistics: what a plan is expected to deliver.

Above the protocol layer: the accuracy planner, the data assumptions it plans under, the
expected errors (EMSE, expected MSE, the paper's TMSE), the release display rules and the
inverse searches (the smallest epsilon or n for a target). Every module here reads
:mod:`fa_hetdp.protocol`'s plan; nothing below imports this package.
"""
