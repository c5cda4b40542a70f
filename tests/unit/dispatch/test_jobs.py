"""Fleet jobs as data: sbatch's arguments, the runtimes' command lines and the job script (bash -n checks it)."""

from __future__ import annotations

import subprocess

from envkit.dispatch.jobs import job_script, launch_argv, model_slug, mount_name, pyxis_image, sbatch_args, time_limit


def test_sbatch_asks_for_the_targets_partition_constraint_gres_account_qos_and_time(make_job):
    job = make_job(partition="gpu", constraint="h100", gres_type="h100", gpus=2, account="vision", qos="high",
                   time_limit="00:30:00")
    args = sbatch_args(job)
    assert args[0] == "--parsable"
    for want in ("--partition=gpu", "--constraint=h100", "--gres=gpu:h100:2", "--account=vision", "--qos=high",
                 "--time=00:30:00", "--job-name=envkit-vision-torch25-h100", f"--chdir={job.workdir}"):
        assert want in args


def test_without_a_gres_type_or_time_limit_one_gpu_and_the_payloads_timeout_plus_slack(make_job):
    job = make_job()
    args = sbatch_args(job)
    assert "--gres=gpu:1" in args and not any(a.startswith(("--partition", "--account", "--qos")) for a in args)
    assert time_limit(job) == "15"  # 600 s + 300 s, in minutes


def test_the_docker_runtime_mounts_the_payload_read_only_and_runs_the_local_certifications_command(make_job):
    argv = launch_argv(make_job())
    assert argv[:3] == ["docker", "run", "--rm"]
    assert f"{make_job().mount_dir}:/opt/envkit-run:ro" in argv
    i = argv.index("vision/torch25:2.5.1-cu124-py3.11-dda970b6")
    assert argv[i + 1:] == ["python3", "/opt/envkit-run/envkit_check", "--expect", "/opt/envkit-run/expect.json",
                            "--json", "--mode", "$mode", "--timeout", "590"]


def test_pyxis_and_apptainer_command_lines(make_job):
    job = make_job(runtime="pyxis")
    job = job.__class__(**{**job.__dict__, "image": "registry.corp:5000/vision/torch25:tag"})
    pyxis = launch_argv(job)
    assert pyxis[:2] == ["srun", "--ntasks=1"]
    assert "--container-image=registry.corp:5000#vision/torch25:tag" in pyxis
    assert f"--container-mounts={job.mount_dir}:/opt/envkit-run:ro" in pyxis
    job = job.__class__(**{**job.__dict__, "target": job.target.model_copy(update={"runtime": "apptainer"})})
    apptainer = launch_argv(job)
    assert apptainer[:4] == ["apptainer", "exec", "--nv", "--cleanenv"]
    assert "docker://registry.corp:5000/vision/torch25:tag" in apptainer


def test_pyxis_spells_the_registry_host_apart():
    assert pyxis_image("nvcr.io/nvidia/pytorch:24.01") == "nvcr.io#nvidia/pytorch:24.01"
    assert pyxis_image("localhost/team/img:1") == "localhost#team/img:1"
    assert pyxis_image("team/img:1") == "team/img:1"  # a Docker Hub name: no host


def test_every_runtimes_job_script_is_valid_bash(make_job, tmp_path):
    for runtime in ("docker", "pyxis", "apptainer"):
        script = job_script(make_job(runtime=runtime), "0.1.0")
        path = tmp_path / f"{runtime}.sh"
        path.write_text(script)
        assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0, script
        assert "report.json.part" in script and 'mv -f "$out/report.json.part" "$out/report.json"' in script


def test_the_docker_script_removes_its_container_on_sigterm_and_asks_for_gpus_only_where_there_are(make_job):
    script = job_script(make_job(), "0.1.0")
    assert "wait; remove_container; exit 143' TERM INT" in script  # the client stopped first, then the container
    removal = script.split("remove_container() {")[1].split("\n}")[0]
    assert 'docker rm -f "$name"' in removal and 'docker container inspect "$name"' in removal  # until it stays gone
    assert '"${gpus[@]}"' in script and "--ulimit=memlock=-1" in script.split("gpus=(--gpus")[1].splitlines()[0]
    assert '--mode "$mode"' in script


def test_names_and_the_payload_directory_are_stable():
    assert model_slug("RTX 6000 Ada") == "rtx-6000-ada" and model_slug("9.0") == "9-0"
    assert mount_name("sha256:x", {"torch": "2.5.1"}) == mount_name("sha256:x", {"torch": "2.5.1"})
    assert mount_name("sha256:x", {"torch": "2.5.1"}) != mount_name("sha256:y", {"torch": "2.5.1"})
