"""Sphinx configuration of ddplab's documentation site (built by ./dev docs; see docs/README.md)."""
import pathlib
import sys

DOCS = pathlib.Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]  # this checkout's ddplab and bench, then the extensions

import ddplab  # noqa: E402

project = "ddplab"
author = "the ddplab authors"
copyright = "the ddplab authors"
release = version = ddplab.__version__

extensions = [
    "myst_nb",  # Markdown pages (MyST) and the lessons' notebooks
    "sphinx.ext.autodoc",
    "plain_docstrings",  # ddplab's plain-text docstrings as reST (indented blocks: literal)
    "sphinxcontrib.mermaid",  # the diagrams of architecture.md
    "lesson_notebooks",  # docs/lessons/: the lessons with their outputs (the tests' executed copies)
    "ddplab_magics",  # the %ddp_* reference, from the magics' generated docstrings
    "ddplab_settings",  # the DDPLab settings, from their traitlets help
    "bench_results",  # the performance tables, from docs/performance/results.json
]

exclude_patterns = ["_build", "_ext", "README.md", "**.ipynb_checkpoints"]
root_doc = "index"
default_role = "literal"  # docstrings write code as `name`
smartquotes = False  # quotes in this site are mostly code: "zh", "file"

# MyST and the notebooks: the lessons are rendered from executed copies, never executed by Sphinx
# itself (lesson_notebooks.py executes a missing one once, beforehand)
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
myst_fence_as_directive = ["mermaid"]
nb_execution_mode = "off"
nb_merge_streams = True
nb_output_stderr = "show"
nb_render_error_lexer = "myst-ansi"  # tracebacks keep their colours; Chinese messages lex too

autodoc_member_order = "bysource"
autodoc_typehints = "none"
autodoc_default_options = {"members": True, "undoc-members": False}

html_theme = "furo"
html_title = f"ddplab {release}"
html_static_path = ["_static"]
html_css_files = ["ddplab.css"]
html_show_sourcelink = False
