"""The ``fa-hetdp`` command line.

The subcommands and the supervisor of the Flower processes that ``fa-hetdp run`` starts.
"""
