"""Time fidelity: what the emulated times would be on the modeled hardware (issue 8).

Pieces (pure Python, no sockets; SimPy for the projector):
  constants     hardware profiles (profiles/*.yaml): named constants with unit,
                source and tag V/D/A/I; A/I carry a [lo, hi] range.
                load_profile(name_or_path) -> HardwareProfile; profile[name] is SI;
                profile.with_overrides({name: value_in_file_unit}).
  network_model collective_time(op, algo, values, value_bytes, world, profile) -> s
                for allreduce (switch: in-network aggregation, testbed.wire format;
                ring, ps, none) and allgather (ring, ps); message_time(bytes,
                profile, switches=1) for one point-to-point message; packet_count(values),
                wire_bytes(values, profile). `switches`: the switches on a path (trees).
  paths         the point's paths.json (switches per host pair, from the topology),
                read into the trace headers by monitor.load_traces; collective_switches.
  monitor       fidelity_report(traces | folder, profile, tdf=None, band=(0.8, 1.25))
                -> FidelityReport (network slowdown vs the compute dilation, overruns,
                valid + reasons); calibrate_tdf(measured_op_s, modeled_op_s);
                converged(prev, new, tol).
  projector     project(traces, profile, compute_time=None) -> Projection: replays
                recorded traces (hosts.common.trace) on SimPy with the hardware
                models (p2p messages queue on hosts' links, fabric.py);
                project_world(traces, world, profile, compute_time=None)
                synthesizes `world` workers from rank 0's template and replaces
                server traces by service models (server_model.py).
  records       fidelity_and_projection(work_dir, profile_name, tdf, workload,
                iterations, summary, ...): a point's fidelity and projection records.
  sensitivity   sensitivity(fn, profile) -> SensitivityBand over the A/I ranges;
                projection_sensitivity(traces, profile, world=None, ...).
"""
