"""The view protocol: what shows a pool live (the widget dashboard, text views, or nothing).

The Lab calls a view with its `Live` (run_state: rank states and facts; metrics: live series):

    begin(live)    a cell starts on live.run_state.running
    update(live)   while it runs, at most every DDPLab.frame seconds, and only when something
                   changed; between cells on start-up progress, restarts and drills; and from
                   the Lab's watcher thread (a rank lost while idle) only if `threadsafe`
    end(live)      the cell ended (its result is about to be printed)
    show()         display the view where the user is (%ddp_start, %ddp_status); views that print
                   as they go have nothing to display
    shows_progress True if the view itself shows start-up progress (the magics then print none)
    background     set by the Lab while a cell runs in the background: update only, display nothing
                   (the notebook's other cells are running)

A view that raises is reported once on stderr and left alone for the rest of the cell: it never
breaks a cell. No widget imports here: the Lab imports this module.
"""


class View:
    """A view that shows nothing: the default for scripts (and the base of every view)."""

    threadsafe = False
    shows_progress = False
    background = False

    def begin(self, live):
        pass

    def update(self, live):
        pass

    def end(self, live):
        pass

    def show(self):
        pass

