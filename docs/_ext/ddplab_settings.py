"""The {ddplab-settings} directive: every configurable trait of ddplab.shared.config.DDPLab, in the order the
class declares them, with its type, default and help text (the traitlets help `%config DDPLab`
prints). A default computed at run time (from the environment or the machine) is said to be so:
its help says from what."""
import inspect

from ddplab_magics import inline
from docutils import nodes
from sphinx.util.docutils import SphinxDirective


class Settings(SphinxDirective):
    has_content = False

    def run(self):
        from traitlets import TraitType

        from ddplab.shared.config import DDPLab

        self.env.note_dependency(inspect.getsourcefile(DDPLab))
        computed = getattr(DDPLab, "_trait_default_generators", {})
        items = nodes.definition_list()
        for name, trait in DDPLab.__dict__.items():
            if not isinstance(trait, TraitType) or not trait.metadata.get("config"):
                continue
            term = nodes.term("", "", nodes.literal(f"DDPLab.{name}", f"DDPLab.{name}"),
                              nodes.Text(f" ({type(trait).__name__}, default "))
            if name in computed:
                term += nodes.Text("computed at start)")
            else:
                value = trait.default_value_repr()
                term += [nodes.literal(value, value), nodes.Text(")")]
            item = nodes.definition_list_item("", term, nodes.definition("", nodes.paragraph("", "", *inline(trait.help))))
            item["ids"].append(nodes.make_id(f"setting-{name}"))
            items += item
        return [items]


def setup(app):
    app.add_directive("ddplab-settings", Settings)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
