"""ddplab's docstrings are plain text, not reStructuredText: examples and tables are indented under
the sentence that introduces them, often without a blank line or a `::`. For autodoc, every such
indented block becomes a literal block (the lines kept as they are), except the continuation
lines of a list item. Addresses such as tcp://HOST:PORT are not made links (only http and https are).
Doctest blocks (>>>) and everything else are left to reST."""
import re

ITEM = re.compile(r"^([-*+]|\d+[.)]) \S")
NOT_A_LINK = re.compile(r"(`[^`]*`)|\b(tcp|ipc|file|zmq)://")  # code spans are left as they are


def literal_blocks(lines):
    out, i, in_item = [], 0, False
    while i < len(lines):
        line = lines[i]
        indented = line.startswith((" ", "\t")) and line.strip()
        if indented and not in_item:
            block = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            while out and not out[-1].strip():
                out.pop()
            if out and out[-1].rstrip().endswith(":") and not out[-1].rstrip().endswith("::"):
                out[-1] = out[-1].rstrip() + ":"  # "...:" + ":" reads "...:" and opens the block
            elif not (out and out[-1].rstrip().endswith("::")):
                out += ["", "::"]
            out += ["", *block, ""]
            continue
        if line.strip() and not line.startswith((" ", "\t")):
            in_item = bool(ITEM.match(line))
        out.append(line)
        i += 1
    return out


def _process(app, what, name, obj, options, lines):
    lines[:] = literal_blocks(lines)
    for i, line in enumerate(lines):
        if not line.startswith((" ", "\t", ">>>", "...")):  # prose: escape the scheme's colon
            lines[i] = NOT_A_LINK.sub(lambda m: m.group(1) or m.group(2) + "\\://", line)


def setup(app):
    app.connect("autodoc-process-docstring", _process)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
