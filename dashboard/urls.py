from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from django.views.generic import RedirectView

from dashboard.console import vendor, views

urlpatterns = [
    path("", views.home, name="home"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    # Before the session page: its <path:> would swallow ".../calls/3/" (issue 11 inspector).
    path("", include("dashboard.console.inspector_views")),
    # Session ids carry ':' and '/' (e.g. "locomo:conv-26"), hence <path:>.
    path("sessions/<path:session_id>/", views.session, name="session"),
    path("events/<int:seq>/", views.event, name="event"),
    path("traces/", views.traces, name="traces"),
    path("traces/spans/<str:span_id>/", views.span, name="span"),
    path("alerts/", views.alerts, name="alerts"),
    path("alerts/<int:alert_id>/acknowledge/", views.alert_acknowledge, name="alert_acknowledge"),
    path("alerts/<int:alert_id>/resolve/", views.alert_resolve, name="alert_resolve"),
    path("kernels/", views.kernels, name="kernels"),
    path("kernels/<str:action>/<path:session_id>/", views.kernel_action, name="kernel_action"),
    path("runs/", views.runs, name="runs"),
    path("runs/<path:session_id>/stop/", views.run_stop, name="run_stop"),
    path("", include("dashboard.console.replay_views")),  # the replay lab (issue 6)
    path("", include("dashboard.qualify.views")),  # model qualification (issue 33)
    path("vendor/plotly.min.js", views.plotly_js, name="plotly_js"),
    path("vendor/plotly.css", vendor.plotly_css, name="plotly_css"),
    path("admin/", admin.site.urls),
    # Pages that name no icon (admin's) make the browser ask for /favicon.ico.
    path(
        "favicon.ico",
        RedirectView.as_view(url=f"/{settings.STATIC_URL.strip('/')}/favicon.svg", permanent=True),
    ),
]

if settings.SCROLL_BENCH:
    # bench/console.py's span load; views.bench_load also insists on loopback and staff.
    urlpatterns += [
        path("bench/load/", views.bench_load, name="bench_load"),
        path("bench/load/<int:load_id>/", views.bench_load, name="bench_load_status"),
    ]

# An outage met outside a view (a middleware, the 404 page) answers 503, not 500.
handler500 = "dashboard.outage.server_error"
# A form past the size or field limits, or any other refused request, gets the console's page.
handler400 = "dashboard.limits.bad_request"
