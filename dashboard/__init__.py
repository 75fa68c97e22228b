"""The Scroll console: the Django project and its one app, in one package."""
