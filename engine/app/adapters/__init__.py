"""Adapters that put dltsched in front of real cluster managers: Slurm (:mod:`.slurm`, a scheduling
daemon) and Kubernetes (:mod:`.k8s`, scheduler-extender endpoints). Both reach the solver only through
:func:`dltsched.engine.app.api.solve_round`."""
