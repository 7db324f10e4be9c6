"""What ocw knows about text, with no other part of ocw: the system messages in
English and Chinese (`i18n`) and the widgets' labels (`ui_text`), model text made
safe to show (`safe_html`), secrets kept out of every output (`secrets`), the
typed errors (`errors`), argument checks (`checks`), token counting (`tokens`),
the fixed texts ocw writes into a request (`prompts`), the word rules of a
`%compact -- focus` (`focus`) and the bounded memos of what was read from a text
(`memo`).

The bottom layer: its modules import only each other and the standard library
or third-party packages, never another ocw layer, so every layer above can
use them.
"""
