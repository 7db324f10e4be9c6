"""A conversation over a store: the session with its branch views (`session`,
`branch_view`, `pruned_view`, `history`), the store façade that opens one
(`sessions`, which is `ocw.Store`), one agent turn (`turn`), compaction and
pruning as the session runs them (`compaction`, `pruning`), each turn's messages
read for a later compaction while the user reads the reply (`read_ahead`), and the tools the
model may call (`tools` what a tool is, `builtin_tools`, `toolbox` the registry
of one turn).

It may import the store, the context engine, the providers and the text layer;
it knows nothing of IPython, magics or widgets, so `ocw.Session` works from any
Python program.
"""
