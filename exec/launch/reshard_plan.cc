#include "exec/launch/reshard_plan.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/check.h"

namespace alpasim::exec::launch {
namespace {

/// A half-open box [lo, hi) of global coordinates.
struct Box {
  std::vector<std::int64_t> lo, hi;
};

bool empty(const Box& b) {
  for (std::size_t a = 0; a < b.lo.size(); ++a) {
    if (b.lo[a] >= b.hi[a]) return true;
  }
  return false;
}

Box box_of(const Block& b) {
  Box x{b.offset, b.offset};
  for (std::size_t a = 0; a < b.shape.size(); ++a) x.hi[a] += b.shape[a];
  return x;
}

Box intersect(const Box& a, const Box& b) {
  Box x = a;
  for (std::size_t i = 0; i < a.lo.size(); ++i) {
    x.lo[i] = std::max(a.lo[i], b.lo[i]);
    x.hi[i] = std::min(a.hi[i], b.hi[i]);
  }
  return x;
}

/// a \ b as disjoint boxes: peel the parts of `a` below and above `b` axis by axis (at most
/// 2 per axis); what remains lies inside b and is dropped.
void subtract(Box a, const Box& b, std::vector<Box>* out) {
  if (empty(intersect(a, b))) {
    out->push_back(std::move(a));
    return;
  }
  for (std::size_t i = 0; i < a.lo.size(); ++i) {
    if (a.lo[i] < b.lo[i]) {
      Box below = a;
      below.hi[i] = b.lo[i];
      out->push_back(std::move(below));
      a.lo[i] = b.lo[i];
    }
    if (a.hi[i] > b.hi[i]) {
      Box above = a;
      above.lo[i] = b.hi[i];
      out->push_back(std::move(above));
      a.hi[i] = b.hi[i];
    }
  }
}

/// Row-major strides (elements) of a block of shape `shape`.
std::vector<std::int64_t> strides(const std::vector<std::int64_t>& shape) {
  std::vector<std::int64_t> s(shape.size(), 1);
  for (std::size_t a = shape.size(); a-- > 1;) s[a - 1] = s[a] * shape[a];
  return s;
}

/// The copy of global box `x` from block `src` to block `dst`, axes merged (BoxCopy).
BoxCopy make_copy(const Box& x, const Block& src, const Block& dst, std::int32_t s, std::int32_t d) {
  BoxCopy c;
  c.source = s;
  c.destination = d;
  const std::size_t r = x.lo.size();
  if (r == 0) {  // a scalar
    c.extent = {1};
    c.src_stride = {1};
    c.dst_stride = {1};
    return c;
  }
  const auto ss = strides(src.shape), ds = strides(dst.shape);
  for (std::size_t a = 0; a < r; ++a) {
    c.src_offset += (x.lo[a] - src.offset[a]) * ss[a];
    c.dst_offset += (x.lo[a] - dst.offset[a]) * ds[a];
  }
  // Innermost first: keep the last axis (stride 1 on both sides), drop other extent-1 axes,
  // merge an axis into the next inner kept one when both sides are contiguous across them.
  std::vector<std::int64_t> ext, sst, dst_;
  for (std::size_t a = r; a-- > 0;) {
    const std::int64_t e = x.hi[a] - x.lo[a];
    if (a + 1 < r && e == 1) continue;
    if (!ext.empty() && sst.back() * ext.back() == ss[a] && dst_.back() * ext.back() == ds[a]) {
      ext.back() *= e;
      continue;
    }
    ext.push_back(e);
    sst.push_back(ss[a]);
    dst_.push_back(ds[a]);
  }
  c.extent.assign(ext.rbegin(), ext.rend());
  c.src_stride.assign(sst.rbegin(), sst.rend());
  c.dst_stride.assign(dst_.rbegin(), dst_.rend());
  return c;
}

std::string join(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

}  // namespace

std::int64_t BoxCopy::elements() const {
  std::int64_t n = 1;
  for (std::int64_t e : extent) n *= e;
  return n;
}

std::vector<BoxCopy> plan_block_copies(const std::vector<Block>& sources, const std::vector<Block>& destinations) {
  const std::size_t rank = sources.empty() ? 0 : sources[0].shape.size();
  for (const auto* list : {&sources, &destinations}) {
    for (const Block& b : *list) {
      ALPASIM_CHECK(b.shape.size() == rank && b.offset.size() == rank)
          << "blocks of one tensor must share its rank " << rank << ", got " << b.shape.size();
    }
  }
  std::vector<BoxCopy> out;
  for (std::size_t d = 0; d < destinations.size(); ++d) {
    const Box dbox = box_of(destinations[d]);
    for (std::size_t r = sources.size(); r-- > 0;) {
      const Box own = intersect(box_of(sources[r]), dbox);
      if (empty(own)) continue;
      // What a higher rank's block also covers is that rank's (the CPU backend writes it last).
      std::vector<Box> pieces{own};
      for (std::size_t q = r + 1; q < sources.size() && !pieces.empty(); ++q) {
        const Box higher = intersect(box_of(sources[q]), dbox);
        if (empty(higher)) continue;
        std::vector<Box> next;
        for (Box& p : pieces) subtract(std::move(p), higher, &next);
        pieces = std::move(next);
      }
      for (const Box& p : pieces) {
        out.push_back(make_copy(p, sources[r], destinations[d], static_cast<std::int32_t>(r),
                                static_cast<std::int32_t>(d)));
      }
    }
  }
  return out;
}

std::int64_t ReshardPlan::elements(std::int32_t source, std::int32_t destination) const {
  std::int64_t n = 0;
  for (const BoxCopy& c : copies) {
    if (c.source == source && c.destination == destination) n += c.elements();
  }
  return n;
}

ReshardExchange reshard_exchange(const ReshardPlan& plan, std::int32_t me) {
  ReshardExchange x;
  for (std::size_t k = 0; k < plan.copies.size(); ++k) {
    const BoxCopy& c = plan.copies[k];
    if (c.source == me && c.destination == me) {
      x.local.push_back(k);
    } else if (c.source == me) {
      x.send[c.destination].push_back(k);
      x.send_elements += c.elements();
    } else if (c.destination == me) {
      x.recv[c.source].push_back(k);
      x.recv_elements += c.elements();
    }
  }
  return x;
}

namespace {

/// Row-major strides of a contiguous box of `extent`.
std::vector<std::int64_t> contiguous(const std::vector<std::int64_t>& extent) { return strides(extent); }

}  // namespace

BoxCopy packed_destination(const BoxCopy& copy, std::int64_t at) {
  BoxCopy c = copy;
  c.dst_offset = at;
  c.dst_stride = contiguous(c.extent);
  return c;
}

BoxCopy packed_source(const BoxCopy& copy, std::int64_t at) {
  BoxCopy c = copy;
  c.src_offset = at;
  c.src_stride = contiguous(c.extent);
  return c;
}

bool is_reshard(const Instruction& in) { return in.kind == InstrKind::kAllGather && in.inputs.size() == 1; }

core::Result<ReshardPlan> reshard_plan(const Program& p, std::size_t device, std::size_t instruction) {
  const std::string where = "device index " + std::to_string(device) + " instruction #" + std::to_string(instruction);
  if (device >= p.code.size() || instruction >= p.code[device].size()) {
    return core::invalid_argument(where + ": expected an instruction of the program, got none");
  }
  const Instruction& in = p.code[device][instruction];
  if (!is_reshard(in)) {
    return core::invalid_argument(where + ": expected a resharding all_gather (one input), got " +
                                  std::string(instr_kind_name(in.kind)) + " with " + std::to_string(in.inputs.size()) +
                                  " inputs");
  }
  ReshardPlan plan;
  plan.group = in.group;
  plan.scale = static_cast<float>(in.scale);
  std::vector<Block> sources, destinations;
  const std::size_t rank = p.buffers[static_cast<std::size_t>(in.buffer)].shape.size();
  auto block = [&](BufferId id, Block* out) -> core::Status {
    if (id < 0 || static_cast<std::size_t>(id) >= p.buffers.size()) {
      return core::invalid_argument(where + ": expected buffers of the program, got b" + std::to_string(id));
    }
    const Buffer& b = p.buffers[static_cast<std::size_t>(id)];
    out->shape = b.shape;
    out->offset = b.block_offset.empty() ? std::vector<std::int64_t>(b.shape.size(), 0) : b.block_offset;
    if (b.shape.size() != rank || out->offset.size() != rank) {
      return core::invalid_argument(where + ": expected blocks of rank " + std::to_string(rank) + ", got b" +
                                    std::to_string(id) + " with shape rank " + std::to_string(b.shape.size()) +
                                    " and offset rank " + std::to_string(out->offset.size()));
    }
    return core::ok_status();
  };
  for (std::int32_t m : in.group) {
    if (m < 0 || static_cast<std::size_t>(m) >= p.code.size()) {
      return core::invalid_argument(where + ": expected group members among the program's devices, got " +
                                    std::to_string(m));
    }
    const Instruction* mine = nullptr;
    for (const Instruction& x : p.code[static_cast<std::size_t>(m)]) {
      if (x.collective_id == in.collective_id && is_reshard(x)) {
        mine = &x;
        break;
      }
    }
    if (!mine) {
      return core::invalid_argument(where + ": expected device index " + std::to_string(m) +
                                    " to take part in collective " + std::to_string(in.collective_id) + ", got none");
    }
    if (mine->group != in.group) {
      return core::invalid_argument(where + ": expected device index " + std::to_string(m) +
                                    " to use the same group for collective " + std::to_string(in.collective_id) +
                                    ", got another");
    }
    plan.source_buffer.push_back(mine->inputs[0]);
    plan.destination_buffer.push_back(mine->buffer);
    Block s, d;
    ALPASIM_RETURN_IF_ERROR(block(mine->inputs[0], &s));
    ALPASIM_RETURN_IF_ERROR(block(mine->buffer, &d));
    sources.push_back(std::move(s));
    destinations.push_back(std::move(d));
  }
  plan.copies = plan_block_copies(sources, destinations);
  for (const BoxCopy& c : plan.copies) {
    if (c.extent.size() > static_cast<std::size_t>(kMaxCopyAxes)) {
      return core::invalid_argument(where + ": expected at most " + std::to_string(kMaxCopyAxes) +
                                    " axes per copy, got " + std::to_string(c.extent.size()));
    }
  }
  return plan;
}

void apply_copy_on_host(const BoxCopy& c, const float* src, float* dst, float scale) {
  const std::size_t r = c.extent.size();
  std::vector<std::int64_t> idx(r, 0);
  const std::int64_t n = c.elements();
  for (std::int64_t k = 0; k < n; ++k) {
    std::int64_t si = c.src_offset, di = c.dst_offset;
    for (std::size_t a = 0; a < r; ++a) {
      si += idx[a] * c.src_stride[a];
      di += idx[a] * c.dst_stride[a];
    }
    dst[di] = src[si] * scale;
    for (std::size_t a = r; a-- > 0;) {
      if (++idx[a] < c.extent[a]) break;
      idx[a] = 0;
    }
  }
}

std::string copy_to_text(const BoxCopy& c) {
  return "src r" + std::to_string(c.source) + " -> dst r" + std::to_string(c.destination) + ": extent " +
         join(c.extent) + " src +" + std::to_string(c.src_offset) + " " + join(c.src_stride) + " dst +" +
         std::to_string(c.dst_offset) + " " + join(c.dst_stride);
}

}  // namespace alpasim::exec::launch
