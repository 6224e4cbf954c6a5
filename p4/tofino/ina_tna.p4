/*
 * ina_tna.p4: the in-network aggregation program for Tofino (TNA, bf-p4c).
 *
 * Same protocol (testbed/wire.py) and the same table, action, counter and
 * register names as ../ina.p4 wherever Tofino allows. Written by hand and NOT
 * compiled here (no SDE on these machines): expect bf-p4c to ask for
 * adjustments (stage placement, PHV fitting) before it runs on hardware or
 * tofino-model.
 *
 * Where Tofino forces differences from ../ina.p4 (v1model):
 *   Aggregator.agg_values: one Register per lane (agg_values_0 .. agg_values_31),
 *     because a stateful ALU (RegisterAction) updates one 32-bit word per pass.
 *   MAX_VALUES is 32 per pass (not 64): 32 lane SALUs plus bitmap, seq, exponent
 *     and drop simulator fit the 48 SALUs of a Tofino 1 pipe. 64 values need
 *     register pairs and recirculation (as SwitchML does for 1 KiB payloads);
 *     hosts must send count <= 32 to this program.
 *   Aggregator.worker_bitmap: one pair register {ver0, ver1} per slot (index
 *     = slot, not slot*2+ver), so one RegisterAction sets the worker's bit in its
 *     version and reads the other, as a register is accessed once per pass.
 *   Aggregator.worker_count: not here. A slot completes when its bitmap equals
 *     the job's worker_mask (the controller sets popcount(worker_mask) ==
 *     num_workers), because count and bitmap would each need the other's
 *     result in the same pass. The other-version clear of v1model is dropped
 *     too: with the seq guard it is redundant (a late copy of a finished chunk
 *     then gets a unicast reply instead of being dropped; both are correct).
 *   Aggregator.slot_seq: a pair {seq, used} so a never-used slot takes any seq.
 *   Lanes beyond `count` are not zeroed on a chunk's first contribution (no
 *     spare SALU instruction); results carry only `count` lanes, so they are
 *     never seen.
 *   Ingress.malformed: bad version/op/count/slot_ver are flagged by the parser
 *     and counted in Ingress; frames too short for the parser are dropped by
 *     the Tofino parser itself and are not counted.
 *   Egress gets `result` through a bridged header (TNA has no shared metadata).
 */
#include <core.p4>
#include <tna.p4>

#define MAX_VALUES 32
#define NUM_SLOTS  4096
#define NUM_JOBS   256
#define NUM_PORTS  512
#define MAX_WORKERS 32

const bit<16> ETHERTYPE_IPV4  = 0x0800;
const bit<8>  IPPROTO_UDP     = 17;
const bit<16> INA_PORT_BASE   = 0x5A00;
const bit<16> INA_PORT_MASK   = 0xFFF0;
const bit<8>  INA_VERSION     = 1;
const bit<8>  OP_SUM          = 0;
const bit<8>  OP_OR           = 1;
const bit<8>  OP_MAX          = 2;
const bit<8>  FLAG_RESULT     = 0x01;
const bit<8>  FLAG_RETX       = 0x02;
const MulticastGroupId_t FLOOD_MCAST_GRP = 1;

const bit<2> VERDICT_ABSORB    = 0;
const bit<2> VERDICT_MULTICAST = 1;
const bit<2> VERDICT_UNICAST   = 2;
const bit<2> VERDICT_DUPLICATE = 3;

const bit<2> SEQ_SAME  = 0;
const bit<2> SEQ_NEWER = 1;     /* or the slot was never used */
const bit<2> SEQ_OLDER = 2;

header bridge_t { bit<7> pad; bit<1> result; }
header ethernet_t { bit<48> dst_addr; bit<48> src_addr; bit<16> ether_type; }
header ipv4_t {
    bit<4> version; bit<4> ihl; bit<8> diffserv; bit<16> total_len;
    bit<16> identification; bit<3> flags; bit<13> frag_offset; bit<8> ttl;
    bit<8> protocol; bit<16> hdr_checksum; bit<32> src_addr; bit<32> dst_addr;
}
header udp_t { bit<16> src_port; bit<16> dst_port; bit<16> length; bit<16> checksum; }
header ina_t {
    bit<8> version; bit<8> op; bit<8> flags; bit<8> job_id; bit<16> slot;
    bit<8> slot_ver; bit<8> worker_id; bit<32> seq; bit<8> count; bit<8> exponent;
    bit<16> reserved;
}
header ina_value_t { bit<32> value; }

struct headers_t {
    bridge_t                bridge;
    ethernet_t              ethernet;
    ipv4_t                  ipv4;
    udp_t                   udp;
    ina_t                   ina;
    ina_value_t[MAX_VALUES] vals;
}

struct metadata_t {
    bit<1>  malformed;
    bit<8>  num_workers;
    MulticastGroupId_t mcast_grp;
    bit<32> worker_mask;
    bit<16> slot_base;
    bit<16> slot_count;
    bit<32> wbit;
    bit<32> slot;          /* slot_base + hdr.ina.slot */
    bit<32> idx;           /* slot * 2 + slot_ver */
    bit<2>  seq_state;
    bit<1>  first;
    bit<32> old_bitmap;
    bit<32> new_bitmap;
    bit<2>  verdict;
    bit<32> rand;
    bit<1>  sim_drop;
    bit<1>  port_bound;    /* Ingress.worker_port hit */
    PortId_t bound_port;   /* the port the worker's contributions must come in on */
}

struct bitmap_pair_t { bit<32> ver0; bit<32> ver1; }
struct seq_pair_t    { bit<32> seq;  bit<32> used; }

/* ------------------------------------------------------------ ingress parser */
parser IngressParser(packet_in pkt, out headers_t hdr, out metadata_t meta,
                     out ingress_intrinsic_metadata_t ig_intr_md) {
    ParserCounter() values_left;
    state start {
        pkt.extract(ig_intr_md);
        pkt.advance(PORT_METADATA_SIZE);
        meta = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        transition parse_ethernet;
    }
    state parse_ethernet {
        pkt.extract(hdr.ethernet);
        transition select(hdr.ethernet.ether_type) {
            ETHERTYPE_IPV4: parse_ipv4;
            default: accept;
        }
    }
    state parse_ipv4 {
        pkt.extract(hdr.ipv4);
        transition select(hdr.ipv4.ihl, hdr.ipv4.protocol) {
            (5, IPPROTO_UDP): parse_udp;
            default: accept;
        }
    }
    state parse_udp {
        pkt.extract(hdr.udp);
        transition select(hdr.udp.dst_port) {
            INA_PORT_BASE &&& INA_PORT_MASK: parse_ina;
            default: accept;
        }
    }
    state parse_ina {
        pkt.extract(hdr.ina);
        values_left.set(hdr.ina.count);
        /* version, op <= 2, slot_ver <= 1, count <= 32; else flag as malformed */
        transition select(hdr.ina.version, hdr.ina.op, hdr.ina.slot_ver, hdr.ina.count) {
            (_, OP_MAX + 1, _, _): bad_ina;
            (INA_VERSION, 0 &&& 0xFC, 0 &&& 0xFE, 0): accept;
            (INA_VERSION, 0 &&& 0xFC, 0 &&& 0xFE, 1 .. MAX_VALUES): parse_values;
            default: bad_ina;
        }
    }
    state bad_ina {
        meta.malformed = 1;
        transition accept;
    }
    state parse_values {
        pkt.extract(hdr.vals.next);
        values_left.decrement(1);
        transition select(values_left.is_zero()) {
            true: accept;
            false: parse_values;
        }
    }
}

/* -------------------------------------------------------------- sub-controls */
control Forward(inout headers_t hdr, in ingress_intrinsic_metadata_t ig_intr_md,
                inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    @name(".Forward.set_egress")
    action set_egress(bit<9> port) { ig_tm_md.ucast_egress_port = port; }
    @name(".Forward.flood")
    action flood() {
        ig_tm_md.mcast_grp_a = FLOOD_MCAST_GRP;
        ig_tm_md.level2_exclusion_id = (bit<9>)ig_intr_md.ingress_port;  /* prune ingress */
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

control DropSimulator(in bit<9> port, inout metadata_t meta) {
    Random<bit<32>>() rng;
    @name(".DropSimulator.drop_probability")
    Register<bit<32>, bit<9>>(NUM_PORTS, 0) drop_probability;
    @name(".DropSimulator.dropped")
    Counter<bit<32>, bit<9>>(NUM_PORTS, CounterType_t.PACKETS) dropped;
    RegisterAction<bit<32>, bit<9>, bit<1>>(drop_probability) decide = {
        void apply(inout bit<32> threshold, out bit<1> drop) {
            drop = 0;
            if (meta.rand < threshold) { drop = 1; }
        }
    };
    apply {
        meta.rand = rng.get();
        meta.sim_drop = decide.execute(port);
        if (meta.sim_drop == 1) { dropped.count(port); }
    }
}

/* Loss of results on their way out (ina.p4's second DropSimulator instance,
   "EgressDropSimulator"): its own Random, register and counter in the egress
   pipe, the same threshold rule. */
control EgressDropSimulator(in bit<9> port, out bit<1> sim_drop) {
    Random<bit<32>>() rng;
    bit<32> rand;
    @name(".EgressDropSimulator.drop_probability")
    Register<bit<32>, bit<9>>(NUM_PORTS, 0) drop_probability;
    @name(".EgressDropSimulator.dropped")
    Counter<bit<32>, bit<9>>(NUM_PORTS, CounterType_t.PACKETS) dropped;
    RegisterAction<bit<32>, bit<9>, bit<1>>(drop_probability) decide = {
        void apply(inout bit<32> threshold, out bit<1> drop) {
            drop = 0;
            if (rand < threshold) { drop = 1; }
        }
    };
    apply {
        rand = rng.get();
        sim_drop = decide.execute(port);
        if (sim_drop == 1) { dropped.count(port); }
    }
}

/* One lane: one Register and four RegisterActions (Tofino's limit per
   register). `first` overwrites inside the op's action. P4 has no string
   pasting, so each lane's register name is spelled out in FOR_EACH_LANE_NAMED. */
#define LANE_DECLARE(i, NAME)                                                   \
    @name(NAME)                                                                 \
    Register<bit<32>, bit<32>>(NUM_SLOTS * 2, 0) agg_values_##i;                \
    RegisterAction<bit<32>, bit<32>, bit<32>>(agg_values_##i) lane_sum_##i = {   \
        void apply(inout bit<32> v, out bit<32> rv) {                           \
            if (meta.first == 1) { v = hdr.vals[i].value; }                     \
            else { v = v + hdr.vals[i].value; }                                 \
            rv = v;                                                             \
        }                                                                       \
    };                                                                          \
    RegisterAction<bit<32>, bit<32>, bit<32>>(agg_values_##i) lane_or_##i = {    \
        void apply(inout bit<32> v, out bit<32> rv) {                           \
            if (meta.first == 1) { v = hdr.vals[i].value; }                     \
            else { v = v | hdr.vals[i].value; }                                 \
            rv = v;                                                             \
        }                                                                       \
    };                                                                          \
    RegisterAction<bit<32>, bit<32>, bit<32>>(agg_values_##i) lane_max_##i = {   \
        void apply(inout bit<32> v, out bit<32> rv) {                           \
            if (meta.first == 1 || (int<32>)hdr.vals[i].value > (int<32>)v) {   \
                v = hdr.vals[i].value;                                          \
            }                                                                   \
            rv = v;                                                             \
        }                                                                       \
    };                                                                          \
    RegisterAction<bit<32>, bit<32>, bit<32>>(agg_values_##i) lane_read_##i = {  \
        void apply(inout bit<32> v, out bit<32> rv) { rv = v; }                 \
    };

#define LANE_APPLY(i)                                                           \
    if (hdr.vals[i].isValid()) {                                                \
        if (meta.verdict == VERDICT_UNICAST) {                                  \
            hdr.vals[i].value = lane_read_##i.execute(meta.idx);                \
        } else if (hdr.ina.op == OP_SUM) {                                      \
            hdr.vals[i].value = lane_sum_##i.execute(meta.idx);                 \
        } else if (hdr.ina.op == OP_OR) {                                       \
            hdr.vals[i].value = lane_or_##i.execute(meta.idx);                  \
        } else {                                                                \
            hdr.vals[i].value = lane_max_##i.execute(meta.idx);                 \
        }                                                                       \
    }

#define FOR_EACH_LANE(M)                                                        \
    M(0)  M(1)  M(2)  M(3)  M(4)  M(5)  M(6)  M(7)                              \
    M(8)  M(9)  M(10) M(11) M(12) M(13) M(14) M(15)                             \
    M(16) M(17) M(18) M(19) M(20) M(21) M(22) M(23)                             \
    M(24) M(25) M(26) M(27) M(28) M(29) M(30) M(31)

#define FOR_EACH_LANE_NAMED(M)                                                  \
    M(0, ".Aggregator.agg_values_0")   M(1, ".Aggregator.agg_values_1")         \
    M(2, ".Aggregator.agg_values_2")   M(3, ".Aggregator.agg_values_3")         \
    M(4, ".Aggregator.agg_values_4")   M(5, ".Aggregator.agg_values_5")         \
    M(6, ".Aggregator.agg_values_6")   M(7, ".Aggregator.agg_values_7")         \
    M(8, ".Aggregator.agg_values_8")   M(9, ".Aggregator.agg_values_9")         \
    M(10, ".Aggregator.agg_values_10") M(11, ".Aggregator.agg_values_11")       \
    M(12, ".Aggregator.agg_values_12") M(13, ".Aggregator.agg_values_13")       \
    M(14, ".Aggregator.agg_values_14") M(15, ".Aggregator.agg_values_15")       \
    M(16, ".Aggregator.agg_values_16") M(17, ".Aggregator.agg_values_17")       \
    M(18, ".Aggregator.agg_values_18") M(19, ".Aggregator.agg_values_19")       \
    M(20, ".Aggregator.agg_values_20") M(21, ".Aggregator.agg_values_21")       \
    M(22, ".Aggregator.agg_values_22") M(23, ".Aggregator.agg_values_23")       \
    M(24, ".Aggregator.agg_values_24") M(25, ".Aggregator.agg_values_25")       \
    M(26, ".Aggregator.agg_values_26") M(27, ".Aggregator.agg_values_27")       \
    M(28, ".Aggregator.agg_values_28") M(29, ".Aggregator.agg_values_29")       \
    M(30, ".Aggregator.agg_values_30") M(31, ".Aggregator.agg_values_31")

control Aggregator(inout headers_t hdr, inout metadata_t meta) {
    @name(".Aggregator.slot_seq")
    Register<seq_pair_t, bit<32>>(NUM_SLOTS * 2, {0, 0}) slot_seq;
    RegisterAction<seq_pair_t, bit<32>, bit<2>>(slot_seq) check_seq = {
        void apply(inout seq_pair_t s, out bit<2> state) {
            if (s.used == 0 || (int<32>)(hdr.ina.seq - s.seq) > 0) {
                s.seq = hdr.ina.seq;
                s.used = 1;
                state = SEQ_NEWER;
            } else if (s.seq == hdr.ina.seq) {
                state = SEQ_SAME;
            } else {
                state = SEQ_OLDER;
            }
        }
    };

    @name(".Aggregator.worker_bitmap")
    Register<bitmap_pair_t, bit<32>>(NUM_SLOTS, {0, 0}) worker_bitmap;
    /* sets the worker's bit in its version (resetting it on a new chunk),
       returns the old bitmap of that version */
    RegisterAction<bitmap_pair_t, bit<32>, bit<32>>(worker_bitmap) add_ver0 = {
        void apply(inout bitmap_pair_t b, out bit<32> old) {
            old = b.ver0;
            if (meta.first == 1) { b.ver0 = meta.wbit; } else { b.ver0 = b.ver0 | meta.wbit; }
        }
    };
    RegisterAction<bitmap_pair_t, bit<32>, bit<32>>(worker_bitmap) add_ver1 = {
        void apply(inout bitmap_pair_t b, out bit<32> old) {
            old = b.ver1;
            if (meta.first == 1) { b.ver1 = meta.wbit; } else { b.ver1 = b.ver1 | meta.wbit; }
        }
    };

    @name(".Aggregator.result_exponent")
    Register<bit<8>, bit<32>>(NUM_SLOTS * 2, 0) result_exponent;
    RegisterAction<bit<8>, bit<32>, bit<8>>(result_exponent) max_exponent = {
        void apply(inout bit<8> e, out bit<8> rv) {
            if (meta.first == 1 || (int<8>)hdr.ina.exponent > (int<8>)e) { e = hdr.ina.exponent; }
            rv = e;
        }
    };
    RegisterAction<bit<8>, bit<32>, bit<8>>(result_exponent) read_exponent = {
        void apply(inout bit<8> e, out bit<8> rv) { rv = e; }
    };

    FOR_EACH_LANE_NAMED(LANE_DECLARE)

    apply {
        meta.seq_state = check_seq.execute(meta.idx);
        if (meta.seq_state == SEQ_OLDER) {
            meta.verdict = VERDICT_DUPLICATE;
        } else {
            if (meta.seq_state == SEQ_NEWER) { meta.first = 1; }
            if (hdr.ina.slot_ver == 0) {
                meta.old_bitmap = add_ver0.execute(meta.slot);
            } else {
                meta.old_bitmap = add_ver1.execute(meta.slot);
            }
            meta.new_bitmap = meta.old_bitmap | meta.wbit;
            if (meta.first == 0 && (meta.old_bitmap & meta.wbit) != 0) {
                /* already counted: answer if the chunk is complete */
                if (meta.old_bitmap == meta.worker_mask) {
                    meta.verdict = VERDICT_UNICAST;
                } else {
                    meta.verdict = VERDICT_DUPLICATE;
                }
            } else if (meta.first == 1 && meta.wbit == meta.worker_mask) {
                meta.verdict = VERDICT_MULTICAST;       /* one-worker job */
            } else if (meta.first == 0 && meta.new_bitmap == meta.worker_mask) {
                meta.verdict = VERDICT_MULTICAST;
            } else {
                meta.verdict = VERDICT_ABSORB;
            }
        }
        if (meta.verdict == VERDICT_UNICAST) {
            hdr.ina.exponent = read_exponent.execute(meta.idx);
        } else if (meta.verdict != VERDICT_DUPLICATE) {
            hdr.ina.exponent = max_exponent.execute(meta.idx);
        }
        if (meta.verdict != VERDICT_DUPLICATE) {
            FOR_EACH_LANE(LANE_APPLY)
        }
    }
}

/* ------------------------------------------------------------------ ingress */
control Ingress(inout headers_t hdr, inout metadata_t meta,
                in ingress_intrinsic_metadata_t ig_intr_md,
                in ingress_intrinsic_metadata_from_parser_t ig_prsr_md,
                inout ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md,
                inout ingress_intrinsic_metadata_for_tm_t ig_tm_md) {
    Counter<bit<32>, bit<8>>(NUM_JOBS, CounterType_t.PACKETS) ina_packets;
    Counter<bit<32>, bit<8>>(NUM_JOBS, CounterType_t.PACKETS) ina_results;
    Counter<bit<32>, bit<8>>(NUM_JOBS, CounterType_t.PACKETS) ina_retransmits;
    Counter<bit<32>, bit<8>>(NUM_JOBS, CounterType_t.PACKETS) ina_duplicates_dropped;
    Counter<bit<32>, bit<8>>(NUM_JOBS, CounterType_t.PACKETS) bad_job;
    Counter<bit<32>, bit<8>>(NUM_JOBS, CounterType_t.PACKETS) bad_worker;
    Counter<bit<32>, bit<8>>(NUM_JOBS, CounterType_t.PACKETS) bad_port;
    Counter<bit<32>, bit<8>>(NUM_JOBS, CounterType_t.PACKETS) bad_slot;
    Counter<bit<32>, bit<1>>(1, CounterType_t.PACKETS) malformed;

    Forward() forward;
    DropSimulator() drop_simulator;
    Aggregator() aggregator;

    action drop() { ig_dprsr_md.drop_ctl = 1; }
    action set_job(bit<8> num_workers, bit<16> mcast_grp, bit<32> worker_mask,
                   bit<16> slot_base, bit<16> slot_count) {
        meta.num_workers = num_workers;
        meta.mcast_grp = mcast_grp;
        meta.worker_mask = worker_mask;
        meta.slot_base = slot_base;
        meta.slot_count = slot_count;
    }
    @defaultonly
    action unknown_job() {
        bad_job.count(hdr.ina.job_id);
        drop();
    }
    table job_table {
        key = { hdr.ina.job_id: exact @name("job_id"); }
        actions = { set_job; @defaultonly unknown_job; }
        const default_action = unknown_job();
        size = NUM_JOBS;
    }
    /* Membership is bound to ports: (job, worker) -> the port its contributions
       must come in on; a miss or another port is bad_port (impersonation). */
    action set_worker_port(PortId_t port) {
        meta.port_bound = 1;
        meta.bound_port = port;
    }
    @defaultonly
    action unbound_worker() { }
    table worker_port {
        key = {
            hdr.ina.job_id: exact @name("job_id");
            hdr.ina.worker_id: exact @name("worker_id");
        }
        actions = { set_worker_port; @defaultonly unbound_worker; }
        const default_action = unbound_worker();
        size = NUM_JOBS * MAX_WORKERS;
    }
    /* worker_id -> bit: a table, since Tofino shifts only by constants */
    action set_wbit(bit<32> wbit) { meta.wbit = wbit; }
    table worker_bit {
        key = { hdr.ina.worker_id: exact; }
        actions = { set_wbit; }
        default_action = set_wbit(0);       /* worker_id >= 32: no bit, bad_worker */
        size = 256;
        const entries = {
            0: set_wbit(32w1 << 0);   1: set_wbit(32w1 << 1);   2: set_wbit(32w1 << 2);
            3: set_wbit(32w1 << 3);   4: set_wbit(32w1 << 4);   5: set_wbit(32w1 << 5);
            6: set_wbit(32w1 << 6);   7: set_wbit(32w1 << 7);   8: set_wbit(32w1 << 8);
            9: set_wbit(32w1 << 9);   10: set_wbit(32w1 << 10); 11: set_wbit(32w1 << 11);
            12: set_wbit(32w1 << 12); 13: set_wbit(32w1 << 13); 14: set_wbit(32w1 << 14);
            15: set_wbit(32w1 << 15); 16: set_wbit(32w1 << 16); 17: set_wbit(32w1 << 17);
            18: set_wbit(32w1 << 18); 19: set_wbit(32w1 << 19); 20: set_wbit(32w1 << 20);
            21: set_wbit(32w1 << 21); 22: set_wbit(32w1 << 22); 23: set_wbit(32w1 << 23);
            24: set_wbit(32w1 << 24); 25: set_wbit(32w1 << 25); 26: set_wbit(32w1 << 26);
            27: set_wbit(32w1 << 27); 28: set_wbit(32w1 << 28); 29: set_wbit(32w1 << 29);
            30: set_wbit(32w1 << 30); 31: set_wbit(32w1 << 31);
        }
    }

    apply {
        if (meta.malformed == 1) {
            malformed.count(0);
            drop();
        } else if (hdr.ina.isValid() && (hdr.ina.flags & FLAG_RESULT) == 0) {
            drop_simulator.apply(ig_intr_md.ingress_port, meta);
            if (meta.sim_drop == 1) {
                drop();
            } else if (job_table.apply().hit) {
                worker_bit.apply();
                worker_port.apply();
                if ((meta.worker_mask & meta.wbit) == 0) {
                    bad_worker.count(hdr.ina.job_id);
                    drop();
                } else if (meta.port_bound == 0 || meta.bound_port != ig_intr_md.ingress_port) {
                    bad_port.count(hdr.ina.job_id);
                    drop();
                } else if (hdr.ina.slot >= meta.slot_count) {
                    bad_slot.count(hdr.ina.job_id);
                    drop();
                } else {
                    ina_packets.count(hdr.ina.job_id);
                    meta.slot = (bit<32>)meta.slot_base + (bit<32>)hdr.ina.slot;
                    meta.idx = (meta.slot << 1) | (bit<32>)hdr.ina.slot_ver;
                    aggregator.apply(hdr, meta);
                    hdr.bridge.setValid();
                    if (meta.verdict == VERDICT_MULTICAST) {
                        ina_results.count(hdr.ina.job_id);
                        hdr.bridge.result = 1;
                        hdr.ina.flags = (hdr.ina.flags & ~FLAG_RETX) | FLAG_RESULT;
                        hdr.udp.src_port = hdr.udp.dst_port;
                        ig_tm_md.mcast_grp_a = meta.mcast_grp;
                    } else if (meta.verdict == VERDICT_UNICAST) {
                        ina_retransmits.count(hdr.ina.job_id);
                        hdr.bridge.result = 1;
                        hdr.ina.flags = (hdr.ina.flags & ~FLAG_RETX) | FLAG_RESULT;
                        bit<16> sender_port = hdr.udp.src_port;
                        hdr.udp.src_port = hdr.udp.dst_port;
                        hdr.udp.dst_port = sender_port;
                        hdr.ethernet.dst_addr = hdr.ethernet.src_addr;
                        hdr.ipv4.dst_addr = hdr.ipv4.src_addr;
                        ig_tm_md.ucast_egress_port = ig_intr_md.ingress_port;
                    } else {
                        if (meta.verdict == VERDICT_DUPLICATE) {
                            ina_duplicates_dropped.count(hdr.ina.job_id);
                        }
                        drop();
                    }
                }
            }
        } else {
            hdr.bridge.setValid();
            hdr.bridge.result = 0;
            forward.apply(hdr, ig_intr_md, ig_tm_md);
        }
    }
}

control IngressDeparser(packet_out pkt, inout headers_t hdr, in metadata_t meta,
                        in ingress_intrinsic_metadata_for_deparser_t ig_dprsr_md) {
    apply { pkt.emit(hdr); }
}

/* ------------------------------------------------------------------- egress */
struct egress_headers_t {
    bridge_t   bridge;
    ethernet_t ethernet;
    ipv4_t     ipv4;
    udp_t      udp;
    ina_t      ina;         /* values stay in the payload */
}
struct egress_metadata_t { }

parser EgressParser(packet_in pkt, out egress_headers_t hdr, out egress_metadata_t meta,
                    out egress_intrinsic_metadata_t eg_intr_md) {
    state start {
        pkt.extract(eg_intr_md);
        pkt.extract(hdr.bridge);
        transition select(hdr.bridge.result) {
            1: parse_result;
            default: accept;
        }
    }
    state parse_result {
        pkt.extract(hdr.ethernet);
        pkt.extract(hdr.ipv4);
        pkt.extract(hdr.udp);
        pkt.extract(hdr.ina);
        transition accept;
    }
}

control Egress(inout egress_headers_t hdr, inout egress_metadata_t meta,
               in egress_intrinsic_metadata_t eg_intr_md,
               in egress_intrinsic_metadata_from_parser_t eg_prsr_md,
               inout egress_intrinsic_metadata_for_deparser_t eg_dprsr_md,
               inout egress_intrinsic_metadata_for_output_port_t eg_oport_md) {
    action rewrite_dst(bit<48> dst_mac, bit<32> dst_ip, bit<16> dst_port) {
        hdr.ethernet.dst_addr = dst_mac;
        hdr.ipv4.dst_addr = dst_ip;
        hdr.udp.dst_port = dst_port;
    }
    @defaultonly
    action drop_replica() { eg_dprsr_md.drop_ctl = 1; }
    table replica_rewrite {
        key = { eg_intr_md.egress_rid: exact @name("egress_rid"); }
        actions = { rewrite_dst; @defaultonly drop_replica; }
        const default_action = drop_replica();
        size = 8192;
    }
    action set_switch_address(bit<48> mac, bit<32> ip) {
        hdr.ethernet.src_addr = mac;
        hdr.ipv4.src_addr = ip;
        hdr.ipv4.diffserv = 0;
        hdr.ipv4.identification = 0;
        hdr.ipv4.flags = 2;
        hdr.ipv4.frag_offset = 0;
        hdr.ipv4.ttl = 64;
        hdr.ipv4.total_len = 16w44 + ((bit<16>)hdr.ina.count << 2);
        hdr.udp.length = 16w24 + ((bit<16>)hdr.ina.count << 2);
        hdr.udp.checksum = 0;
    }
    table switch_address {
        actions = { set_switch_address; }
        default_action = set_switch_address(48w0x0200000000fe, 32w0x0a0000fe);
        size = 1;
    }
    EgressDropSimulator() egress_drop_simulator;
    apply {
        hdr.bridge.setInvalid();
        if (hdr.ina.isValid()) {                       /* a result made in Ingress */
            bool to_worker = true;
            if (eg_intr_md.egress_rid != 0) {
                to_worker = replica_rewrite.apply().hit;   /* miss: drop_replica */
            }
            if (to_worker) {
                bit<1> sim_drop;
                egress_drop_simulator.apply(eg_intr_md.egress_port, sim_drop);
                if (sim_drop == 1) {
                    eg_dprsr_md.drop_ctl = 1;
                } else {
                    switch_address.apply();
                }
            }
        }
    }
}

control EgressDeparser(packet_out pkt, inout egress_headers_t hdr, in egress_metadata_t meta,
                       in egress_intrinsic_metadata_for_deparser_t eg_dprsr_md) {
    Checksum() ipv4_csum;
    apply {
        if (hdr.ipv4.isValid()) {
            hdr.ipv4.hdr_checksum = ipv4_csum.update({
                hdr.ipv4.version, hdr.ipv4.ihl, hdr.ipv4.diffserv, hdr.ipv4.total_len,
                hdr.ipv4.identification, hdr.ipv4.flags, hdr.ipv4.frag_offset,
                hdr.ipv4.ttl, hdr.ipv4.protocol, hdr.ipv4.src_addr, hdr.ipv4.dst_addr });
        }
        pkt.emit(hdr);
    }
}

Pipeline(IngressParser(), Ingress(), IngressDeparser(),
         EgressParser(), Egress(), EgressDeparser()) pipe;
Switch(pipe) main;
