"""ocw in an IPython kernel: the magics (`magics`), the kernel-side controller
they and the widgets call (`runtime`), the `Ocw` configuration (`config`),
references in a message (`references`: `{name}`, `{In[n]}`), the one command
table (`commands`), what each command does and returns (`actions`, `results`),
the reports and views it shows (`report`, `summary_view`, `items`), streaming a
reply into a cell (`streaming`), export, the `ocw` console script (`cli`) and
the demo.

It may import the conversation, store, context, providers and text layers. It
never imports the widgets: the package root hands the runtime a builder for
them, so the commands work the same in a terminal with no widget library.
"""
