from __future__ import annotations

from django.contrib import admin
from django.urls import path

from dashboard import views

urlpatterns = [
    path("", views.home, name="home"),
    # Session ids carry ':' and '/' (e.g. "locomo:conv-26"), hence <path:>.
    path("sessions/<path:session_id>/", views.session, name="session"),
    path("admin/", admin.site.urls),
]
