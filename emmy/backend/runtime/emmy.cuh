// Emmy's device library: everything generated kernels may call through `kernel.call`.
//
//   emmy_core.cuh   Vec, zero, align_smem, warp_sum/warp_max, lane_group_sum,
//                   group_sum/group_max, cp.async,
//                   swz/tile_offset (swizzled operand tiles),
//                   fence_proxy_async, grid_dependency_wait/allow_dependents, silu,
//                   mbar_init/mbar_arrive/warp_arrive/mbar_wait (sm_90+)
//   emmy_mma.cuh    emmy::mma::warp_tile (ldmatrix + mma.sync m16n8k16, sm_80+),
//                   emmy::fma::thread_tile (plain FMA)
//   emmy_wgmma.cuh  emmy::wgmma::tile, desc, fence/commit/wait (sm_90a)
//   emmy_tma.cuh    tma_load_2d/3d, mbar_arrive_expect_tx (sm_90+), tensor_map_2d (host)
//
// Standalone checks of each building block: tools/kernel_checks/*.cu.
#pragma once

#include "emmy_core.cuh"
#include "emmy_mma.cuh"
#include "emmy_wgmma.cuh"
#include "emmy_tma.cuh"
#include "attention.cuh"
