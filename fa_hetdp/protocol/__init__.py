"""The private measurement protocol, split by role.

The plan (configuration, calibrated releases, stage layout), the client part, the server
part, the in-process simulation, and the intervals of a result from its known noise.
"""
