"""An example devicebench plugin: its workloads live in `workloads.py`, found through an entry point."""
