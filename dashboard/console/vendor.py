"""Plotly under the console's Content-Security-Policy, without 'unsafe-inline'.

Plotly's bundle injects its stylesheets as inline ``<style>`` elements, which ``style-src
'self'`` blocks: its own rules (cursor, modebar, notifier) and the bundled MapLibre CSS. It
skips both when the page already holds an element of the id it would create (the global one
must also carry the class ``no-inline-styles``). So the console serves the same CSS as a file,
``/vendor/plotly.css``, read out of the installed bundle, and the pages that draw charts put
those ids in their head (``{% plotly_assets %}``, in
``console/templatetags/scroll_vendor``).

Plotly's per-chart modebar styles cannot be pre-empted that way (their ids are random), so
the console draws charts without the modebar (``static/scroll.js``). Plotly needs no
'unsafe-eval' for the SVG traces the console draws (scatter, bar): the browser tests run the
pages under ``script-src 'self'`` and would see the EvalError.
"""

from __future__ import annotations

import functools
import logging
import re
from pathlib import Path

import plotly
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET

__all__ = ["PLOTLY_JS", "bundled_style_ids", "plotly_bundle", "plotly_css", "plotly_css_text"]

log = logging.getLogger("dashboard.console.vendor")

PLOTLY_JS = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
# The id Plotly's addStyleRule looks up before creating its global <style>.
GLOBAL_STYLE_ID = "plotly.js-style-global"
# How the bundle turns its rule table into selectors: X is the plot, Y the notifier.
_RULES_LOOP = re.compile(
    r'\};for\((\w+) in (\w+)\)\w+=\1\.replace\(/\^,/," ,"\)'
    r'\.replace\(/X/g,"([^"]+)"\)\.replace\(/Y/g,"([^"]+)"\)'
)
# A bundled stylesheet: created only when no element has its id yet.
_BUNDLED_STYLE = re.compile(
    r'document\.getElementById\("([0-9a-f]{64})"\)\)\{var (\w)=document\.createElement\("style"\);'
    r"\2\.id=\"\1\",\2\.textContent='([^']*)',document\.head\.appendChild\(\2\)"
)


# One "selector": "style" pair of the table; either string may use either quote.
_JS_STRING = r"\"(?:[^\"\\]|\\.)*\"|'(?:[^'\\]|\\.)*'"
_PAIR = re.compile(rf"({_JS_STRING})\s*:\s*({_JS_STRING})\s*[,}}]")


def _js_string(token: str) -> str:
    return re.sub(r"\\(.)", r"\1", token[1:-1])


@functools.cache
def plotly_bundle() -> bytes:
    return PLOTLY_JS.read_bytes()


def _rules_css(source: str) -> str:
    loop = _RULES_LOOP.search(source)
    if loop is None:
        return ""
    table_name, plot, notifier = loop.group(2), loop.group(3), loop.group(4)
    start = source.rfind(f"{table_name}=" + "{", 0, loop.start())
    if start < 0:
        return ""
    table = source[start + len(table_name) + 1 : loop.start() + 1]
    lines = []
    for pair in _PAIR.finditer(table):
        selector, style = _js_string(pair.group(1)), _js_string(pair.group(2))
        full = selector.replace(",", " ,", 1) if selector.startswith(",") else selector
        full = full.replace("X", plot).replace("Y", notifier)
        lines.append(f"{full} {{{style}}}")
    # Plotly inserts each rule at the top of its sheet, so the table's first rule wins ties.
    return "\n".join(reversed(lines))


@functools.cache
def plotly_css_text() -> str:
    """Plotly's own rules and its bundled stylesheets, as one CSS file."""
    source = plotly_bundle().decode("utf-8", "replace")
    rules = _rules_css(source)
    if not rules:
        log.warning("could not read Plotly's style rules from %s; charts draw unstyled", PLOTLY_JS)
    bundled = [m.group(3) for m in _BUNDLED_STYLE.finditer(source)]
    return "\n".join(["/* Plotly's styles, served as a file for the CSP */", rules, *bundled])


@functools.cache
def bundled_style_ids() -> tuple[str, ...]:
    """Ids of the bundled stylesheets plotly.css already holds."""
    source = plotly_bundle().decode("utf-8", "replace")
    return tuple(m.group(1) for m in _BUNDLED_STYLE.finditer(source))


@require_GET
@cache_control(max_age=86400, public=True)
def plotly_css(request: HttpRequest) -> HttpResponse:
    return HttpResponse(plotly_css_text(), content_type="text/css")
