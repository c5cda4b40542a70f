"""The host's verdict on a built image (``verdict``), the certificate that records it (``certificate``), the reports
(``report``: JSON, JUnit, HTML), and the gate ``envkit run`` puts before a job (``gate``)."""
