"""The terminal face: the ``frognano`` command line.

``main.py`` holds the click group and the fix/undo/serve/watch commands (the console script is
``frognano.cli.main:main``); ``models.py`` the model/export commands; ``synth.py`` the synth
command; ``render.py`` the rich progress and report rendering (also used by watch mode).

Deliberately empty of imports: the group lives in ``main.py`` rather than here so the module
``frognano.cli.main`` is never shadowed by a function of the same name, and importing the
package stays as light as importing ``frognano``.
"""
