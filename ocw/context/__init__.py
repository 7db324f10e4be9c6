"""The context engine: occupancy, cut selection, compaction, the compaction count.

Pure logic lives in `occupancy`, `cut`, `count`, `facts` and `snip`; `engine`
is the one place that talks to a provider and the store.
"""
