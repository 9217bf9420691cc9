"""Who may call the admin API: operator keys and the DRF authentication and permission
that every ``/v1/admin`` view declares by default (``REST_FRAMEWORK`` in settings).

The ``audit`` app records what operators do; this app decides who they are.
"""
