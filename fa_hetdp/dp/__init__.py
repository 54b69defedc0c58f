"""The differential-privacy core.

Noise calibration (AGM, CGM), the noise mechanisms, privacy accounting and composition,
and the random generators that noise is drawn from.
"""
