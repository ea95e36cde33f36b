"""Adapters that put dltsched in front of real cluster managers and research schedulers: Slurm
(:mod:`.slurm`, a scheduling daemon), Kubernetes (:mod:`.k8s`, scheduler-extender endpoints), Gavel
(:mod:`.gavel`, a policy taking Gavel's per-round throughputs) and Blox (:mod:`.blox`, a scheduling and
placement policy on Blox's job and cluster state). All reach the solver only through
:func:`dltsched.engine.app.api.solve_round`."""
