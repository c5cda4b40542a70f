"""Fleet certification through the team's scheduler: jobs and their Slurm scripts (``jobs``), Kubernetes Jobs
(``kube``), what a scheduler says of a job (``states``), Slurm's clients (``slurm``) and the Kubernetes API
(``kube_api``), running the jobs (``runner``) and the fleet's verdict and promotion gate (``verdict``)."""
