-- Wireshark dissector for the in-network aggregation (INA) protocol.
-- Layout: testbed/wire.py (the one definition of the format). UDP ports
-- 0x5A00..0x5A0F, as source (results) or destination (contributions).
--
-- Use:  wireshark -X lua_script:testbed/wireshark/ina.lua trace.pcap
--       tshark -X lua_script:testbed/wireshark/ina.lua -r trace.pcap -Y ina \
--              -T fields -e ina.job -e ina.slot -e ina.seq -e ina.value
-- or copy this file into ~/.local/lib/wireshark/plugins/.

local INA_PORT_BASE = 0x5A00
local INA_PORT_COUNT = 16
local INA_HLEN = 16
local MAX_VALUES = 64

local ina = Proto("ina", "In-Network Aggregation")

local ops = { [0] = "SUM", [1] = "OR", [2] = "MAX" }

local f = ina.fields
f.version   = ProtoField.uint8("ina.version", "Version", base.DEC)
f.op        = ProtoField.uint8("ina.op", "Op", base.DEC, ops)
f.flags     = ProtoField.uint8("ina.flags", "Flags", base.HEX)
f.result    = ProtoField.bool("ina.flags.result", "Result (from switch)", 8, nil, 0x01)
f.retx      = ProtoField.bool("ina.flags.retx", "Retransmission", 8, nil, 0x02)
f.job       = ProtoField.uint8("ina.job", "Job", base.DEC)
f.slot      = ProtoField.uint16("ina.slot", "Slot", base.DEC)
f.slot_ver  = ProtoField.uint8("ina.slot_ver", "Slot version", base.DEC)
f.worker    = ProtoField.uint8("ina.worker", "Worker", base.DEC)
f.seq       = ProtoField.uint32("ina.seq", "Sequence (chunk)", base.DEC)
f.count     = ProtoField.uint8("ina.count", "Value count", base.DEC)
f.exponent  = ProtoField.int8("ina.exponent", "Exponent", base.DEC)
f.reserved  = ProtoField.uint16("ina.reserved", "Reserved", base.HEX)
f.value     = ProtoField.int32("ina.value", "Value", base.DEC)
-- A frame the capture cut short (a snaplen, e.g. switch.capture_bytes: 96) is
-- not malformed: its header decodes and its values were simply not captured.
-- Filter such frames with `ina.cut`; `_ws.malformed` / expert errors stay for
-- frames that really are wrong.
f.cut       = ProtoField.bool("ina.cut", "Cut by the capture (snaplen)")
f.captured  = ProtoField.uint8("ina.values_captured", "Values captured", base.DEC)

local e_malformed = ProtoExpert.new("ina.malformed", "Malformed INA packet",
                                    expert.group.MALFORMED, expert.severity.ERROR)
local e_cut = ProtoExpert.new("ina.cut.expert", "Values not captured (capture snaplen)",
                              expert.group.UNDECODED, expert.severity.NOTE)
ina.experts = { e_malformed, e_cut }

function ina.dissector(buf, pinfo, tree)
    local len = buf:len()                 -- bytes captured
    local wire_len = buf:reported_len()   -- bytes on the wire
    if len < INA_HLEN then
        local t = tree:add(ina, buf())
        if wire_len >= INA_HLEN then
            t:add(f.cut, true):set_generated()
            t:add_proto_expert_info(e_cut, "header cut by the capture (snaplen)")
        else
            t:add_proto_expert_info(e_malformed, "shorter than the 16-byte header")
        end
        return len
    end
    pinfo.cols.protocol = "INA"
    local count = buf(12, 1):uint()
    local nvals = math.min(count, MAX_VALUES, math.floor((len - INA_HLEN) / 4))
    local t = tree:add(ina, buf(0, INA_HLEN + 4 * nvals))

    t:add(f.version, buf(0, 1))
    t:add(f.op, buf(1, 1))
    local ft = t:add(f.flags, buf(2, 1))
    ft:add(f.result, buf(2, 1))
    ft:add(f.retx, buf(2, 1))
    t:add(f.job, buf(3, 1))
    t:add(f.slot, buf(4, 2))
    t:add(f.slot_ver, buf(6, 1))
    t:add(f.worker, buf(7, 1))
    t:add(f.seq, buf(8, 4))
    t:add(f.count, buf(12, 1))
    t:add(f.exponent, buf(13, 1))
    t:add(f.reserved, buf(14, 2))

    local vt = t:add(ina, buf(INA_HLEN, 4 * nvals), string.format("Values (%d)", nvals))
    for i = 0, nvals - 1 do
        vt:add(f.value, buf(INA_HLEN + 4 * i, 4))
    end

    if buf(0, 1):uint() ~= 1 then
        t:add_proto_expert_info(e_malformed, "unknown protocol version")
    end
    local wire_vals = math.floor((wire_len - INA_HLEN) / 4)
    if count > MAX_VALUES or wire_vals < count then
        t:add_proto_expert_info(e_malformed, "count larger than the payload or than 64")
    elseif nvals < count then
        t:add(f.cut, true):set_generated()
        t:add(f.captured, nvals):set_generated()
        t:add_proto_expert_info(e_cut, string.format("%d of %d values captured (capture snaplen)", nvals, count))
    end

    local flags = buf(2, 1):uint()
    local kind = (bit.band(flags, 1) ~= 0) and "result" or "contribution"
    if bit.band(flags, 2) ~= 0 then kind = kind .. " RETX" end
    pinfo.cols.info = string.format("INA %s %s job=%d slot=%d.%d worker=%d seq=%d n=%d%s",
        ops[buf(1, 1):uint()] or "?", kind, buf(3, 1):uint(), buf(4, 2):uint(),
        buf(6, 1):uint(), buf(7, 1):uint(), buf(8, 4):uint(), count,
        (nvals < count and count <= MAX_VALUES and wire_vals >= count) and " [cut by capture]" or "")
    return INA_HLEN + 4 * nvals
end

local udp_port = DissectorTable.get("udp.port")
for port = INA_PORT_BASE, INA_PORT_BASE + INA_PORT_COUNT - 1 do
    udp_port:add(port, ina)
end
