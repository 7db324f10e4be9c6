"""The context engine: occupancy, cut selection, compaction, the compaction count,
and the node arithmetic the rest stands on (`graph`: depths and running totals;
`render`: the history a model reads).

Pure logic lives in `graph`, `occupancy`, `cut`, `count`, `facts`, `snip`,
`prune`, `calibration` and `compaction_log`; `engine` plans and checks a
compaction, calling a summarizer it is handed. It may import the providers'
interface and the text layer only: no store, no session, no I/O of its own.
`events` is the small bus the session publishes on.
"""
