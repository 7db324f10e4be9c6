"""Where sessions live: rows in, rows out. The interface every backend keeps
(`api`), node ids (`ids`), the default file (`paths`), the marker rule both
backends share (`marker`), the tail of a branch a session holds in memory
(`tail`), a copy between stores (`transfer`), and the two backends:
`duckdb/` (the file, its hand-over between kernels, migrations, ownership) and
`postgres/` (the team database: store, connection, schema, listener, URL, a
test cluster).

The store knows no Session object and no model. It may import the context
engine's pure node arithmetic (`ocw.context.graph`), the providers and the
text layer; nothing above it.
"""
