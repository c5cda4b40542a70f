"""Fleet certification through the team's scheduler: jobs and their scripts (``jobs``), what the scheduler says
of them (``states``), Slurm's clients (``slurm``), running them (``runner``) and the fleet's verdict (``verdict``)."""
