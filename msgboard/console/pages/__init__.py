"""The console's pages, one module each: its routes (``routes``, an
``aiohttp.web.RouteTableDef``), its place in the navigation bar (``NAV``:
(label, path), or None) and its template ``templates/NAME.html``, which
extends ``base.html``. ``msgboard.console.app.PAGES`` lists them.

A page reads the board through ``context`` (``board_of``, ``answer``),
checks what the signed-in identity may do with ``auth.require`` (403) and
``auth.identity(request).may`` (whether to show a button), and renders with
``templating.render``. CSRF needs nothing of a page: ``app.py`` checks
every POST.
"""
