/*
 * ina.p4: in-network aggregation for v1model (BMv2 simple_switch_grpc).
 *
 * Compiled by p4c-bm2-ss (tests/bmv2 compile it whenever p4c is installed and
 * hold its P4Info to ina.p4info.txtpb). The soft switch's Python pipeline
 * (testbed/switch/ina/) implements exactly this program; the two share every
 * name below. The wire format is documented in testbed/wire.py.
 *
 * Names: P4Info names are "<control>.<object>". Every object carries an
 * absolute @name: the sub-controls' (Forward, Aggregator) so their names do
 * not depend on the instance name they get inside Ingress; DropSimulator's
 * two instances are @named ".DropSimulator" and ".EgressDropSimulator" and
 * name their objects after themselves; and
 * the top-level controls' because those are named InaIngress/InaEgress (v1model
 * already declares control types Ingress and Egress: p4c refuses a program
 * that declares them again) while the control plane knows them as
 * "Ingress.<object>" and "Egress.<object>".
 *
 * Packet: Ethernet / IPv4 (IHL 5) / UDP (dst port 0x5A00..0x5A0F) / INA header
 * (16 bytes) / count x bit<32> values. The values are parsed into a header
 * stack of MAX_VALUES (64) one-value headers, driven by `count`: a packet
 * carries 0..64 values, not a fixed 64.
 */
#include <core.p4>
#include <v1model.p4>

#define MAX_VALUES 64
#define NUM_SLOTS  4096        /* slots shared by all jobs; x2 versions */
#define NUM_JOBS   256
#define NUM_PORTS  512
#define MAX_WORKERS 32         /* the worker bitmap's width */

const bit<16> ETHERTYPE_IPV4  = 0x0800;
const bit<8>  IPPROTO_UDP     = 17;
const bit<16> INA_PORT_BASE   = 0x5A00;    /* 23040 .. 23055 */
const bit<16> INA_PORT_MASK   = 0xFFF0;
const bit<8>  INA_VERSION     = 1;
const bit<8>  OP_SUM          = 0;
const bit<8>  OP_OR           = 1;
const bit<8>  OP_MAX          = 2;
const bit<8>  FLAG_RESULT     = 0x01;
const bit<8>  FLAG_RETX       = 0x02;
const bit<16> FLOOD_MCAST_GRP = 1;         /* Forward.flood; jobs use other groups */

/* Aggregator verdicts (testbed/switch/ina/aggregator.py: ABSORB, MULTICAST, ...) */
const bit<2> VERDICT_ABSORB    = 0;        /* counted, kept in the slot, dropped */
const bit<2> VERDICT_MULTICAST = 1;        /* last contribution: result to the job */
const bit<2> VERDICT_UNICAST   = 2;        /* retransmission after completion */
const bit<2> VERDICT_DUPLICATE = 3;        /* already counted or stale: dropped */

error { InaBadVersion, InaBadOp, InaBadCount, InaBadSlotVer }

header ethernet_t {
    bit<48> dst_addr;
    bit<48> src_addr;
    bit<16> ether_type;
}

header ipv4_t {
    bit<4>  version;
    bit<4>  ihl;
    bit<8>  diffserv;
    bit<16> total_len;
    bit<16> identification;
    bit<3>  flags;
    bit<13> frag_offset;
    bit<8>  ttl;
    bit<8>  protocol;
    bit<16> hdr_checksum;
    bit<32> src_addr;
    bit<32> dst_addr;
}

header udp_t {
    bit<16> src_port;
    bit<16> dst_port;
    bit<16> length;
    bit<16> checksum;
}

header ina_t {
    bit<8>  version;
    bit<8>  op;
    bit<8>  flags;
    bit<8>  job_id;
    bit<16> slot;
    bit<8>  slot_ver;
    bit<8>  worker_id;
    bit<32> seq;
    bit<8>  count;
    bit<8>  exponent;      /* int8 on the wire; compared as int<8> */
    bit<16> reserved;
}

header ina_value_t {
    bit<32> value;         /* int32 on the wire; SUM wraps mod 2^32 */
}

struct headers_t {
    ethernet_t              ethernet;
    ipv4_t                  ipv4;
    udp_t                   udp;
    ina_t                   ina;
    ina_value_t[MAX_VALUES] vals;
}

struct metadata_t {
    bit<8>  remaining;     /* parser: values still to extract */
    bit<8>  num_workers;   /* from Ingress.job_table */
    bit<16> mcast_grp;
    bit<32> worker_mask;
    bit<16> slot_base;
    bit<16> slot_count;
    bit<1>  port_bound;    /* Ingress.worker_port hit: the worker has a port */
    bit<9>  bound_port;    /* ... and its contributions must come in there */
    bit<2>  verdict;       /* from Aggregator */
    bit<1>  result;        /* this packet leaves as a result made here */
}

/* ------------------------------------------------------------------ parser */
parser InaParser(packet_in packet, out headers_t hdr, inout metadata_t meta,
                 inout standard_metadata_t standard_metadata) {
    state start {
        packet.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        packet.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (4w5, IPPROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        packet.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            INA_PORT_BASE &&& INA_PORT_MASK: parse_ina;
            default: accept;
        }
    }
    state parse_ina {
        packet.extract(hdr.ina);
        verify(hdr.ina.version == INA_VERSION, error.InaBadVersion);
        verify(hdr.ina.op <= OP_MAX, error.InaBadOp);
        verify(hdr.ina.count <= MAX_VALUES, error.InaBadCount);
        verify(hdr.ina.slot_ver <= 1, error.InaBadSlotVer);
        meta.remaining = hdr.ina.count;
        transition select(hdr.ina.count) {
            0: accept;
            default: parse_values;
        }
    }
    /* count-driven loop over the header stack; a short payload fails here
       with PacketTooShort, which Ingress counts as malformed */
    state parse_values {
        packet.extract(hdr.vals.next);
        meta.remaining = meta.remaining - 1;
        transition select(meta.remaining) {
            0: accept;
            default: parse_values;
        }
    }
}

control InaVerifyChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply { }   /* like the soft switch: IPv4 checksums are not verified */
}

/* -------------------------------------------------------------- sub-controls */

/* Plain L2 forwarding for everything that is not an INA contribution. */
control Forward(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {
    @name(".Forward.set_egress")
    action set_egress(bit<9> port) {
        standard_metadata.egress_spec = port;
    }
    @name(".Forward.flood")
    action flood() {
        standard_metadata.mcast_grp = FLOOD_MCAST_GRP;   /* Egress prunes the ingress port */
    }
    @name(".Forward.l2_forward")
    table l2_forward {
        key = { hdr.ethernet.dst_addr: exact @name("dst_addr"); }
        actions = { set_egress; flood; }
        const default_action = flood();
        size = 4096;
    }
    apply { l2_forward.apply(); }
}

/* Simulated loss (SwitchML-style), one instance per direction: drop when a
   32-bit random number is below the port's threshold (p * 2^32).
   DropSimulator (in Ingress): contributions on their way in, per ingress port.
   EgressDropSimulator (in Egress): results on their way out, per egress port.
   The instances' @names make the objects "DropSimulator.drop_probability",
   "EgressDropSimulator.dropped", ... (testbed/switch/ina/drop_simulator.py). */
control DropSimulator(in bit<9> port, out bool drop) {
    register<bit<32>>(NUM_PORTS) drop_probability;
    counter(NUM_PORTS, CounterType.packets) dropped;

    apply {
        bit<32> threshold;
        bit<32> r;
        drop_probability.read(threshold, (bit<32>)port);
        random(r, 32w0, 32w0xFFFFFFFF);
        drop = r < threshold;
        if (drop) {
            dropped.count((bit<32>)port);
        }
    }
}

/* One lane of the slot: combine the packet's value into the register (or
   overwrite on the first contribution) and write the result into the packet.
   Lanes beyond `count` are zeroed on the first contribution, else untouched. */
#define LANE_COMBINE(i)                                                        \
    if (hdr.vals[i].isValid()) {                                               \
        bit<32> cur;                                                           \
        bit<32> val = hdr.vals[i].value;                                       \
        agg_values.read(cur, vbase + i);                                       \
        if (!first) {                                                          \
            if (hdr.ina.op == OP_SUM) {                                        \
                val = cur + val;                                               \
            } else if (hdr.ina.op == OP_OR) {                                  \
                val = cur | val;                                               \
            } else if ((int<32>)cur > (int<32>)val) {                          \
                val = cur;                                                     \
            }                                                                  \
        }                                                                      \
        agg_values.write(vbase + i, val);                                      \
        hdr.vals[i].value = val;                                               \
    } else if (first) {                                                        \
        agg_values.write(vbase + i, 0);                                        \
    }

/* One lane of a retransmission reply: the stored result into the packet. */
#define LANE_READ(i)                                                           \
    if (hdr.vals[i].isValid()) {                                               \
        agg_values.read(hdr.vals[i].value, vbase + i);                         \
    }

#define FOR_EACH_LANE(M)                                                       \
    M(0)  M(1)  M(2)  M(3)  M(4)  M(5)  M(6)  M(7)                             \
    M(8)  M(9)  M(10) M(11) M(12) M(13) M(14) M(15)                            \
    M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23)                            \
    M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31)                            \
    M(32) M(33) M(34) M(35) M(36) M(37) M(38) M(39)                            \
    M(40) M(41) M(42) M(43) M(44) M(45) M(46) M(47)                            \
    M(48) M(49) M(50) M(51) M(52) M(53) M(54) M(55)                            \
    M(56) M(57) M(58) M(59) M(60) M(61) M(62) M(63)

/* The slot pool. Register index: slot * 2 + slot_ver (x 64 + lane for
   values), slot = job's slot_base + packet's slot. See aggregator.py for the
   decision table; this control sets meta.verdict. */
control Aggregator(inout headers_t hdr, inout metadata_t meta) {
    @name(".Aggregator.worker_bitmap")
    register<bit<32>>(NUM_SLOTS * 2) worker_bitmap;
    @name(".Aggregator.worker_count")
    register<bit<8>>(NUM_SLOTS * 2) worker_count;
    @name(".Aggregator.slot_seq")
    register<bit<32>>(NUM_SLOTS * 2) slot_seq;
    @name(".Aggregator.result_exponent")
    register<bit<8>>(NUM_SLOTS * 2) result_exponent;
    @name(".Aggregator.agg_values")
    register<bit<32>>(NUM_SLOTS * 2 * MAX_VALUES) agg_values;

    apply {
        bit<32> slot = (bit<32>)meta.slot_base + (bit<32>)hdr.ina.slot;
        bit<32> idx = (slot << 1) | (bit<32>)hdr.ina.slot_ver;
        bit<32> other = idx ^ 1;
        bit<32> vbase = idx * MAX_VALUES;
        bit<32> wbit = 32w1 << hdr.ina.worker_id;

        bit<32> bitmap;
        bit<8>  cnt;
        bit<32> last_seq;
        bit<8>  exp;
        worker_bitmap.read(bitmap, idx);
        worker_count.read(cnt, idx);
        slot_seq.read(last_seq, idx);
        result_exponent.read(exp, idx);

        /* serial-number comparison of seq with the chunk the slot holds */
        bit<32> diff = hdr.ina.seq - last_seq;
        bool newer = diff != 0 && diff[31:31] == 0;
        bool first = cnt == 0 || newer;

        meta.verdict = VERDICT_DUPLICATE;
        if (!first && diff != 0) {
            meta.verdict = VERDICT_DUPLICATE;          /* stale: slot moved on */
        } else if (!first && (bitmap & wbit) != 0) {
            if (cnt == meta.num_workers) {
                meta.verdict = VERDICT_UNICAST;        /* result was lost: resend it */
            }
        } else if (!first && cnt >= meta.num_workers) {
            meta.verdict = VERDICT_DUPLICATE;          /* worker already moved on */
        } else {
            /* a new contribution */
            bit<32> other_bitmap;
            worker_bitmap.read(other_bitmap, other);
            worker_bitmap.write(other, other_bitmap & ~wbit);   /* shadow copy */
            if (first) {
                bitmap = 0;
                cnt = 0;
                exp = hdr.ina.exponent;
                slot_seq.write(idx, hdr.ina.seq);
            } else if ((int<8>)hdr.ina.exponent > (int<8>)exp) {
                exp = hdr.ina.exponent;
            }
            cnt = cnt + 1;
            worker_bitmap.write(idx, bitmap | wbit);
            worker_count.write(idx, cnt);
            result_exponent.write(idx, exp);
            hdr.ina.exponent = exp;
            FOR_EACH_LANE(LANE_COMBINE)
            if (cnt == meta.num_workers) {
                meta.verdict = VERDICT_MULTICAST;
            } else {
                meta.verdict = VERDICT_ABSORB;
            }
        }
        if (meta.verdict == VERDICT_UNICAST) {
            hdr.ina.exponent = exp;
            FOR_EACH_LANE(LANE_READ)
        }
    }
}

/* ------------------------------------------------------------------ ingress */
control InaIngress(inout headers_t hdr, inout metadata_t meta,
                inout standard_metadata_t standard_metadata) {
    @name(".Ingress.ina_packets")
    counter(NUM_JOBS, CounterType.packets) ina_packets;
    @name(".Ingress.ina_results")
    counter(NUM_JOBS, CounterType.packets) ina_results;
    @name(".Ingress.ina_retransmits")
    counter(NUM_JOBS, CounterType.packets) ina_retransmits;
    @name(".Ingress.ina_duplicates_dropped")
    counter(NUM_JOBS, CounterType.packets) ina_duplicates_dropped;
    @name(".Ingress.bad_job")
    counter(NUM_JOBS, CounterType.packets) bad_job;
    @name(".Ingress.bad_worker")
    counter(NUM_JOBS, CounterType.packets) bad_worker;
    @name(".Ingress.bad_port")
    counter(NUM_JOBS, CounterType.packets) bad_port;
    @name(".Ingress.bad_slot")
    counter(NUM_JOBS, CounterType.packets) bad_slot;
    @name(".Ingress.malformed")
    counter(1, CounterType.packets) malformed;

    Forward() forward;
    @name(".DropSimulator") DropSimulator() drop_simulator;
    Aggregator() aggregator;

    @name(".Ingress.set_job")
    action set_job(bit<8> num_workers, bit<16> mcast_grp, bit<32> worker_mask,
                   bit<16> slot_base, bit<16> slot_count) {
        meta.num_workers = num_workers;
        meta.mcast_grp = mcast_grp;
        meta.worker_mask = worker_mask;
        meta.slot_base = slot_base;
        meta.slot_count = slot_count;
    }
    @name(".Ingress.unknown_job")
    @defaultonly
    action unknown_job() {
        bad_job.count((bit<32>)hdr.ina.job_id);
        mark_to_drop(standard_metadata);
    }
    @name(".Ingress.job_table")
    table job_table {
        key = { hdr.ina.job_id: exact @name("job_id"); }
        actions = { set_job; @defaultonly unknown_job; }
        const default_action = unknown_job();
        size = NUM_JOBS;
    }

    /* Membership is bound to ports: (job, worker) -> the port the worker's
       contributions must come in on; a miss or another port is Ingress.bad_port,
       so a host cannot contribute under another member's worker id. */
    @name(".Ingress.set_worker_port")
    action set_worker_port(bit<9> port) {
        meta.port_bound = 1;
        meta.bound_port = port;
    }
    @name(".Ingress.unbound_worker")
    @defaultonly
    action unbound_worker() { }
    @name(".Ingress.worker_port")
    table worker_port {
        key = {
            hdr.ina.job_id: exact @name("job_id");
            hdr.ina.worker_id: exact @name("worker_id");
        }
        actions = { set_worker_port; @defaultonly unbound_worker; }
        const default_action = unbound_worker();
        size = NUM_JOBS * MAX_WORKERS;
    }

    apply {
        if (standard_metadata.parser_error != error.NoError) {
            malformed.count(0);
            mark_to_drop(standard_metadata);
        } else if (hdr.ina.isValid() && (hdr.ina.flags & FLAG_RESULT) == 0) {
            bool sim_drop;
            drop_simulator.apply(standard_metadata.ingress_port, sim_drop);
            if (sim_drop) {
                mark_to_drop(standard_metadata);
            } else if (job_table.apply().hit) {
                bit<32> job = (bit<32>)hdr.ina.job_id;
                worker_port.apply();                   /* a lookup; checked below in order */
                if ((meta.worker_mask & (32w1 << hdr.ina.worker_id)) == 0) {
                    bad_worker.count(job);             /* also worker_id >= 32 */
                    mark_to_drop(standard_metadata);
                } else if (meta.port_bound == 0
                           || meta.bound_port != standard_metadata.ingress_port) {
                    bad_port.count(job);               /* impersonation, or no binding */
                    mark_to_drop(standard_metadata);
                } else if (hdr.ina.slot >= meta.slot_count) {
                    bad_slot.count(job);
                    mark_to_drop(standard_metadata);
                } else {
                    ina_packets.count(job);
                    aggregator.apply(hdr, meta);
                    if (meta.verdict == VERDICT_MULTICAST) {
                        ina_results.count(job);
                        meta.result = 1;
                        hdr.ina.flags = (hdr.ina.flags & ~FLAG_RETX) | FLAG_RESULT;
                        hdr.udp.src_port = hdr.udp.dst_port;      /* Egress sets dst */
                        standard_metadata.mcast_grp = meta.mcast_grp;
                    } else if (meta.verdict == VERDICT_UNICAST) {
                        ina_retransmits.count(job);
                        meta.result = 1;
                        hdr.ina.flags = (hdr.ina.flags & ~FLAG_RETX) | FLAG_RESULT;
                        bit<16> sender_port = hdr.udp.src_port;
                        hdr.udp.src_port = hdr.udp.dst_port;
                        hdr.udp.dst_port = sender_port;
                        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
                        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
                        standard_metadata.egress_spec = standard_metadata.ingress_port;
                    } else {
                        if (meta.verdict == VERDICT_DUPLICATE) {
                            ina_duplicates_dropped.count(job);
                        }
                        mark_to_drop(standard_metadata);
                    }
                }
            }
        } else {
            forward.apply(hdr, meta, standard_metadata);
        }
    }
}

/* ------------------------------------------------------------------- egress */
control InaEgress(inout headers_t hdr, inout metadata_t meta,
               inout standard_metadata_t standard_metadata) {
    /* one entry per (job, worker) replica: rid = 0x8000 | job << 5 | worker */
    @name(".Egress.rewrite_dst")
    action rewrite_dst(bit<48> dst_mac, bit<32> dst_ip, bit<16> dst_port) {
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.dst_addr = dst_ip;
        hdr.udp.dst_port = dst_port;
    }
    @name(".Egress.drop_replica")
    @defaultonly
    action drop_replica() {
        mark_to_drop(standard_metadata);
    }
    @name(".Egress.replica_rewrite")
    table replica_rewrite {
        key = { standard_metadata.egress_rid: exact @name("egress_rid"); }
        actions = { rewrite_dst; @defaultonly drop_replica; }
        const default_action = drop_replica();
        size = 8192;
    }

    /* the switch's own address: the source of every result */
    @name(".Egress.set_switch_address")
    action set_switch_address(bit<48> mac, bit<32> ip) {
        hdr.ethernet.src_addr = mac;
        hdr.ipv4.src_addr = ip;
        hdr.ipv4.diffserv = 0;
        hdr.ipv4.identification = 0;
        hdr.ipv4.flags = 3w2;                  /* DF */
        hdr.ipv4.frag_offset = 0;
        hdr.ipv4.ttl = 64;
        hdr.ipv4.total_len = 16w44 + ((bit<16>)hdr.ina.count << 2);
        hdr.udp.length = 16w24 + ((bit<16>)hdr.ina.count << 2);
        hdr.udp.checksum = 0;                  /* payload rewritten; 0 = none (IPv4) */
    }
    @name(".Egress.switch_address")
    table switch_address {
        actions = { set_switch_address; }
        default_action = set_switch_address(48w0x0200000000fe, 32w0x0a0000fe);
        size = 1;
    }

    @name(".EgressDropSimulator") DropSimulator() egress_drop_simulator;

    apply {
        if (meta.result == 1) {
            bool to_worker = true;
            if (standard_metadata.egress_rid != 0) {
                to_worker = replica_rewrite.apply().hit;   /* miss: drop_replica */
            }
            if (to_worker) {
                bool sim_drop;
                egress_drop_simulator.apply(standard_metadata.egress_port, sim_drop);
                if (sim_drop) {
                    mark_to_drop(standard_metadata);
                } else {
                    switch_address.apply();
                }
            }
        } else if (standard_metadata.egress_port == standard_metadata.ingress_port) {
            mark_to_drop(standard_metadata);   /* never back out of the ingress port */
        }
    }
}

control InaComputeChecksum(inout headers_t hdr, inout metadata_t meta) {
    apply {
        update_checksum(
            hdr.ipv4.isValid() && meta.result == 1,
            { hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
              hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset,
              hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr },
            hdr.ipv4.hdr_checksum, HashAlgorithm.csum16);
    }
}

control InaDeparser(packet_out packet, in headers_t hdr) {
    apply {
        packet.emit(hdr.ethernet);
        packet.emit(hdr.ipv4);
        packet.emit(hdr.udp);
        packet.emit(hdr.ina);
        packet.emit(hdr.vals);
    }
}

V1Switch(InaParser(), InaVerifyChecksum(), InaIngress(), InaEgress(),
         InaComputeChecksum(), InaDeparser()) main;
