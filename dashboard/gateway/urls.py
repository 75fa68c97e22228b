from __future__ import annotations

from django.urls import path

from dashboard.gateway import views

urlpatterns = [
    path("chat/completions", views.chat_completions, name="gateway_chat_completions"),
    path("models", views.models, name="gateway_models"),
    path("messages", views.messages, name="gateway_messages"),
    path("messages/count_tokens", views.count_tokens, name="gateway_count_tokens"),
]
