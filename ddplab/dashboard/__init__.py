"""What the notebook shows: ranks' output, start-up progress, and (later) the live dashboard.

The only package of ddplab that may import ipywidgets or matplotlib; engines never import it.
"""
