"""``{% plotly_assets %}``: Plotly's script, and its styles as a file (see ``vendor.py``)."""

from __future__ import annotations

from django import template
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from dashboard.console.vendor import GLOBAL_STYLE_ID, bundled_style_ids

register = template.Library()


@register.simple_tag
def plotly_assets() -> SafeString:
    """The stylesheet under the ids Plotly checks before injecting inline styles, then the
    deferred bundle."""
    css = reverse("plotly_css")
    marks = format_html_join(
        "",
        '<meta name="scroll-plotly-css" content="in {}" id="{}">',
        ((css, style_id) for style_id in bundled_style_ids()),
    )
    return format_html(
        '<link rel="stylesheet" href="{}" id="{}" class="no-inline-styles">{}'
        '<script src="{}" defer></script>',
        css,
        GLOBAL_STYLE_ID,
        marks,
        reverse("plotly_js"),
    )
