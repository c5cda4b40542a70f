"""The in-image payload (``envkit_check/``, run as ``python3 <dir>`` inside images: stdlib and the framework only,
never envkit) and its host side: the files and expectations it is given, and the harness that runs it."""
