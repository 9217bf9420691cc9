"""The operator console around the Django admin: service-backed admin forms, the
dashboard and the invoice preview. Views only; the data lives in the apps."""
