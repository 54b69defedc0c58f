"""The private measurement protocol, split by role.

The plan (configuration, calibrated releases, stage layout), the client part, the server
part, and the in-process simulation.
"""
