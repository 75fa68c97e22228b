"""Plotly's styles served as a file, so the console's CSP needs no 'unsafe-inline'."""

from __future__ import annotations

import pytest
from django.urls import reverse

from dashboard.console import vendor


def test_plotlys_own_rules_are_read_out_of_the_installed_bundle():
    css = vendor.plotly_css_text()

    # The rule table, with X and Y expanded the way the bundle does it.
    assert ".js-plotly-plot .plotly .modebar {position:absolute;top:2px;right:2px;}" in css
    assert ".plotly-notifier .notifier-close:hover {" in css
    assert " X " not in css and "Y ." not in css
    # The bundled stylesheets are in it too, and their ids are what the pages mark.
    assert vendor.bundled_style_ids()
    assert css.count("{") > 100


def test_plotlys_first_rule_wins_ties_as_when_plotly_injects_it():
    rules = vendor._rules_css(
        'var T={"X a":"color:red;","X a ":"color:blue;"};for(k in T)R=k.replace(/^,/," ,")'
        '.replace(/X/g,".plot").replace(/Y/g,".note"),L.addStyleRule(R,T[k]);'
    )
    assert rules.splitlines() == [".plot a  {color:blue;}", ".plot a {color:red;}"]


def test_an_unreadable_bundle_gives_no_rules_rather_than_wrong_ones():
    assert vendor._rules_css("var T={broken};for(k in T)") == ""


@pytest.mark.django_db
def test_pages_with_charts_load_plotly_css_under_the_ids_plotly_checks(admin_client, console_log):
    css = admin_client.get(reverse("plotly_css"))
    assert css.status_code == 200 and css["Content-Type"].startswith("text/css")

    console_log.append(session_id="s1", kind="context_msg", role="user", content="hello")
    html = admin_client.get(reverse("session", args=["s1"])).content.decode()
    assert 'id="plotly.js-style-global" class="no-inline-styles"' in html
    for style_id in vendor.bundled_style_ids():
        assert f'id="{style_id}"' in html
