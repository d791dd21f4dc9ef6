"""Headwater's services: broker, controller and (with consumer groups) coordinator."""
