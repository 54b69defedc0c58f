"""Datasets and their partition into federated clients.

Readers for the standard on-disk formats, the embedded digits, a synthetic generator,
and label-skew and Dirichlet partitions.
"""
