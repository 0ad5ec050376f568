"""The ``streamscope`` command: one module per subcommand, and the simulator it drives.

The simulator: engine nodes, the impairment proxy, the workload and the demo.
"""
