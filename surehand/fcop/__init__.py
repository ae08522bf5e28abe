"""FCoP documents: rendering a TASK or REPORT as ``TASK.md`` (:mod:`surehand.fcop.render`) and
exporting a tenant's TASKs as an FCoP directory tree (:mod:`surehand.fcop.export`)."""
