"""The {ddp-magics} directive: a section per %ddp_* magic, from the magic itself.

IPython's magic_arguments puts the argparse usage and help into each magic's __doc__; this renders
that generated docstring (usage, then the description) and the options from the same argparse
parser, so nothing about a magic is typed twice. Each section has the label magic-NAME (e.g.
{ref}`magic-ddp_start`). Docstrings are plain text: paragraphs become paragraphs (with %magics,
--options and ddplab.names as code), and blocks of examples (indented, or lines that start with %
or !) become code blocks.
"""
import inspect
import re
import textwrap

from docutils import nodes
from sphinx.util.docutils import SphinxDirective

SECTION = re.compile(r"^(positional arguments|options|optional arguments):\s*$")
CODE = re.compile(r"`([^`]+)`|(%config DDPLab(?:\.\w+(?: = (?:\"[^\"]*\"|[\w.]+))?)?"
                  r"|%%?[a-z_]+\*?(?: --[a-z][\w-]*)?|(?<![\w-])--[a-z][\w-]*|\bddplab\.[\w.]+(?:\([^()]*\))?"
                  r"|\bDDPLab\.\w+|\bLab\.\w+(?:\(\))?)")


def inline(text):
    """Text with `quoted` words, %magics, --options and ddplab.names as inline code; nothing else is
    markup."""
    parts, last = [], 0
    for m in CODE.finditer(text):
        if m.start() > last:
            parts.append(nodes.Text(text[last:m.start()]))
        code = m.group(1) or m.group(2)  # `quoted` loses its backticks
        parts.append(nodes.literal(code, code))
        last = m.end()
    if last < len(text):
        parts.append(nodes.Text(text[last:]))
    return parts


def blocks(text):
    """Paragraphs and code blocks of a plain-text docstring."""
    out = []
    for block in re.split(r"\n\s*\n", textwrap.dedent(text).strip("\n")):
        lines = block.splitlines()
        if not lines:
            continue
        if all(line.startswith((" ", "%", "!")) for line in lines):
            code = textwrap.dedent(block)
            out.append(nodes.literal_block(code, code, language="none"))
        else:
            out.append(nodes.paragraph("", "", *inline(" ".join(line.strip() for line in lines))))
    return out


def parts_of(doc):
    """(usage or None, description) of a magic's __doc__ as magic_arguments generated it."""
    if not doc.lstrip().startswith("::"):
        return None, inspect.cleandoc(doc)
    lines = doc.lstrip()[2:].splitlines()
    i = 0
    while i < len(lines) and not lines[i].strip():
        i += 1
    usage = []
    while i < len(lines) and lines[i].strip():
        usage.append(lines[i][2:] if lines[i].startswith("  ") else lines[i])  # argparse's own line breaks
        i += 1
    description = []
    for line in lines[i:]:
        if SECTION.match(line):
            break
        description.append(line)
    return "\n".join(usage), "\n".join(description)


def options(parser):
    """A definition list of the parser's arguments: invocation -> help (argparse's own formatting)."""
    formatter = parser._get_formatter()
    items = nodes.definition_list()
    for action in parser._actions:
        if action.help is None or action.help == "==SUPPRESS==":
            continue
        invocation = formatter._format_action_invocation(action)
        term = nodes.term("", "", nodes.literal(invocation, invocation))
        body = nodes.definition("", nodes.paragraph("", "", *inline(formatter._expand_help(action))))
        items += nodes.definition_list_item("", term, body)
    return items if len(items) else None


class Magics(SphinxDirective):
    has_content = False

    def section(self, label, title, node_title=None):
        section = nodes.section()
        section["names"].append(label)
        section["ids"].append(nodes.make_id(label))
        section += nodes.title("", "", node_title or nodes.literal(title, title))
        self.state.document.note_explicit_target(section)
        return section

    def run(self):
        import ddplab
        from ddplab.kernel.inspect_magics import DDPInspectMagics
        from ddplab.kernel.magics import DDPMagics
        from ddplab.lessons.class_magics import DDPClassMagics

        kinds = (DDPMagics, DDPInspectMagics, DDPClassMagics)
        for cls in kinds:
            self.env.note_dependency(inspect.getsourcefile(cls))
        out = []
        for name, fn in (("load_ext", ddplab.load_ipython_extension), ("unload_ext", ddplab.unload_ipython_extension)):
            section = self.section(f"magic-{name}", f"%{name} ddplab")
            doc = inspect.cleandoc(fn.__doc__).removeprefix(f"%{name} ddplab:").strip()  # the title says it
            section += blocks(doc[:1].upper() + doc[1:])
            out.append(section)
        magics = []
        for order, cls in enumerate(kinds):  # in the order of their sources
            for kind, table in cls.magics.items():
                for magic, method in table.items():
                    fn = getattr(cls, method)
                    magics.append(((order, fn.__code__.co_firstlineno), "%%" if kind == "cell" else "%", magic, fn))
        for _, prefix, magic, fn in sorted(magics):
            section = self.section(f"magic-{magic}", prefix + magic)
            usage, description = parts_of(fn.__doc__ or "")
            if usage:
                usage = prefix + usage[1:] if usage.startswith("%") else usage
                section += nodes.literal_block(usage, usage, language="none")
            section += blocks(description)
            parser = getattr(fn, "parser", None)
            listed = options(parser) if parser is not None else None
            if listed is not None:
                section += listed
            out.append(section)
        return out


def setup(app):
    app.add_directive("ddp-magics", Magics)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
