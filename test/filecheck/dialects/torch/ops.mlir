// RUN: emmy-opt %s | emmy-opt | filecheck %s
// RUN: %emmy-roundtrip | filecheck %s

// Every torch op in its custom form; the second RUN line goes through the generic form.

builtin.module attributes {emmy.model = "test", emmy.tokens = 32 : i64} {
  func.func @ops(%x: tensor<1x32x1024xbf16> {emmy.name = "hidden_states", emmy.role = "input"},
                 %w: tensor<1024xbf16> {emmy.name = "norm.weight", emmy.role = "param"},
                 %b: tensor<1024xbf16>,
                 %qw: tensor<2048x1024xbf16>,
                 %qb: tensor<2048xbf16>,
                 %kv: tensor<1x8x32x128xbf16>,
                 %ids: tensor<1x32xi64>,
                 %table: tensor<100x1024xbf16>,
                 %row: tensor<1024xf32>) -> tensor<1x32x1024xbf16> {
    %h = torch.rms_norm %x, %w {eps = 1.000000e-06 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xbf16>) -> tensor<1x32x1024xbf16>
    %hf = torch.rms_norm %x, %row {eps = 1.000000e-06 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xf32>) -> tensor<1x32x1024xf32>
    %ln = torch.layer_norm %x, %w, %b {eps = 1.000000e-05 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xbf16>, tensor<1024xbf16>) -> tensor<1x32x1024xbf16>
    %q = torch.linear %h, %qw : (tensor<1x32x1024xbf16>, tensor<2048x1024xbf16>) -> tensor<1x32x2048xbf16>
    %qbias = torch.linear %h, %qw, %qb : (tensor<1x32x1024xbf16>, tensor<2048x1024xbf16>, tensor<2048xbf16>) -> tensor<1x32x2048xbf16>
    %qv = torch.view %q : (tensor<1x32x2048xbf16>) -> tensor<1x32x16x128xbf16>
    %qt = torch.transpose %qv {dims = array<i64: 1, 2>} : (tensor<1x32x16x128xbf16>) -> tensor<1x16x32x128xbf16>
    %qp = torch.permute %qv {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x32x16x128xbf16>) -> tensor<1x16x32x128xbf16>
    %lo = torch.slice %qt {dim = 3 : i64, start = 0 : i64, end = 64 : i64, step = 1 : i64} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x32x64xbf16>
    %hi = torch.slice %qt {dim = 3 : i64, start = 64 : i64, end = 128 : i64, step = 1 : i64} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x32x64xbf16>
    %ev = torch.slice %qt {dim = 3 : i64, start = 0 : i64, end = 127 : i64, step = 2 : i64} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x32x64xbf16>
    %n = torch.neg %hi : (tensor<1x16x32x64xbf16>) -> tensor<1x16x32x64xbf16>
    %rot = torch.cat %n, %lo {dim = 3 : i64} : (tensor<1x16x32x64xbf16>, tensor<1x16x32x64xbf16>) -> tensor<1x16x32x128xbf16>
    %attn = torch.scaled_dot_product_attention %rot, %kv, %kv {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = true} : (tensor<1x16x32x128xbf16>, tensor<1x8x32x128xbf16>, tensor<1x8x32x128xbf16>) -> tensor<1x16x32x128xbf16>
    %win = torch.scaled_dot_product_attention %rot, %kv, %kv {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = true, window = 16 : i64} : (tensor<1x16x32x128xbf16>, tensor<1x8x32x128xbf16>, tensor<1x8x32x128xbf16>) -> tensor<1x16x32x128xbf16>
    %s = torch.silu %q : (tensor<1x32x2048xbf16>) -> tensor<1x32x2048xbf16>
    %g = torch.gelu %q {approximate = "tanh"} : (tensor<1x32x2048xbf16>) -> tensor<1x32x2048xbf16>
    %m = torch.mul %s, %g : (tensor<1x32x2048xbf16>, tensor<1x32x2048xbf16>) -> tensor<1x32x2048xbf16>
    %f = torch.to %x : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xf32>
    %fr = torch.rsqrt %f : (tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
    %fe = torch.exp %fr : (tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
    %ft = torch.tanh %fe : (tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
    %fa = torch.add_scalar %ft {value = 1.000000e+00 : f64} : (tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
    %fm = torch.mul_scalar %fa {value = 5.000000e-01 : f64} : (tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
    %fs = torch.sub %fm, %row {alpha = 2.000000e+00 : f64} : (tensor<1x32x1024xf32>, tensor<1024xf32>) -> tensor<1x32x1024xf32>
    %fd = torch.div %fs, %f : (tensor<1x32x1024xf32>, tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
    %mixed = torch.mul %fd, %x : (tensor<1x32x1024xf32>, tensor<1x32x1024xbf16>) -> tensor<1x32x1024xf32>
    %kt = torch.transpose %qt {dims = array<i64: 2, 3>} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x128x32xbf16>
    %mm = torch.matmul %qt, %kt : (tensor<1x16x32x128xbf16>, tensor<1x16x128x32xbf16>) -> tensor<1x16x32x32xbf16>
    %sg = torch.sigmoid %x : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    %rl = torch.relu %sg : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    %pw = torch.pow_scalar %rl {value = 3.000000e+00 : f64} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    %mx = torch.maximum %pw, %x : (tensor<1x32x1024xbf16>, tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    %mn = torch.minimum %mx, %w : (tensor<1x32x1024xbf16>, tensor<1024xbf16>) -> tensor<1x32x1024xbf16>
    %sm = torch.softmax %mn {dim = 2 : i64} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    %av = torch.mean %sm {dims = array<i64: 2>, keepdim = true} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1xbf16>
    %al = torch.mean %sm {dims = array<i64: 1, 2>, keepdim = false} : (tensor<1x32x1024xbf16>) -> tensor<1xbf16>
    %ab = torch.abs %sm : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    %cl = torch.clamp %ab {min = -1.000000e+00 : f64, max = 1.000000e+00 : f64} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    %ch = torch.clamp %cl {max = 5.000000e-01 : f64} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    %su = torch.sum %ch {dims = array<i64: 1, 2>, keepdim = false} : (tensor<1x32x1024xbf16>) -> tensor<1xbf16>
    %am = torch.amax %ch {dims = array<i64: 2>, keepdim = true} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1xbf16>
    %sq = torch.sqrt %ab : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    %ex = torch.expand %row : (tensor<1024xf32>) -> tensor<1x32x1024xf32>
    %e = torch.embedding %table, %ids : (tensor<100x1024xbf16>, tensor<1x32xi64>) -> tensor<1x32x1024xbf16>
    %r = torch.add %x, %e : (tensor<1x32x1024xbf16>, tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    func.return %r : tensor<1x32x1024xbf16>
  }
}

// CHECK:      builtin.module attributes {emmy.model = "test", emmy.tokens = 32 : i64} {
// CHECK-NEXT:   func.func @ops(%x: tensor<1x32x1024xbf16> {emmy.name = "hidden_states", emmy.role = "input"}, %w: tensor<1024xbf16> {emmy.name = "norm.weight", emmy.role = "param"}, %b: tensor<1024xbf16>, %qw: tensor<2048x1024xbf16>, %qb: tensor<2048xbf16>, %kv: tensor<1x8x32x128xbf16>, %ids: tensor<1x32xi64>, %table: tensor<100x1024xbf16>, %row: tensor<1024xf32>) -> tensor<1x32x1024xbf16> {
// CHECK-NEXT:     %h = torch.rms_norm %x, %w {eps = 1.000000e-06 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %hf = torch.rms_norm %x, %row {eps = 1.000000e-06 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xf32>) -> tensor<1x32x1024xf32>
// CHECK-NEXT:     %ln = torch.layer_norm %x, %w, %b {eps = 1.000000e-05 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xbf16>, tensor<1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %q = torch.linear %h, %qw : (tensor<1x32x1024xbf16>, tensor<2048x1024xbf16>) -> tensor<1x32x2048xbf16>
// CHECK-NEXT:     %qbias = torch.linear %h, %qw, %qb : (tensor<1x32x1024xbf16>, tensor<2048x1024xbf16>, tensor<2048xbf16>) -> tensor<1x32x2048xbf16>
// CHECK-NEXT:     %qv = torch.view %q : (tensor<1x32x2048xbf16>) -> tensor<1x32x16x128xbf16>
// CHECK-NEXT:     %qt = torch.transpose %qv {dims = array<i64: 1, 2>} : (tensor<1x32x16x128xbf16>) -> tensor<1x16x32x128xbf16>
// CHECK-NEXT:     %qp = torch.permute %qv {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x32x16x128xbf16>) -> tensor<1x16x32x128xbf16>
// CHECK-NEXT:     %lo = torch.slice %qt {dim = 3 : i64, start = 0 : i64, end = 64 : i64, step = 1 : i64} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x32x64xbf16>
// CHECK-NEXT:     %hi = torch.slice %qt {dim = 3 : i64, start = 64 : i64, end = 128 : i64, step = 1 : i64} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x32x64xbf16>
// CHECK-NEXT:     %ev = torch.slice %qt {dim = 3 : i64, start = 0 : i64, end = 127 : i64, step = 2 : i64} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x32x64xbf16>
// CHECK-NEXT:     %n = torch.neg %hi : (tensor<1x16x32x64xbf16>) -> tensor<1x16x32x64xbf16>
// CHECK-NEXT:     %rot = torch.cat %n, %lo {dim = 3 : i64} : (tensor<1x16x32x64xbf16>, tensor<1x16x32x64xbf16>) -> tensor<1x16x32x128xbf16>
// CHECK-NEXT:     %attn = torch.scaled_dot_product_attention %rot, %kv, %kv {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = true} : (tensor<1x16x32x128xbf16>, tensor<1x8x32x128xbf16>, tensor<1x8x32x128xbf16>) -> tensor<1x16x32x128xbf16>
// CHECK-NEXT:     %win = torch.scaled_dot_product_attention %rot, %kv, %kv {is_causal = true, scale = 1.250000e-01 : f64, enable_gqa = true, window = 16 : i64} : (tensor<1x16x32x128xbf16>, tensor<1x8x32x128xbf16>, tensor<1x8x32x128xbf16>) -> tensor<1x16x32x128xbf16>
// CHECK-NEXT:     %s = torch.silu %q : (tensor<1x32x2048xbf16>) -> tensor<1x32x2048xbf16>
// CHECK-NEXT:     %g = torch.gelu %q {approximate = "tanh"} : (tensor<1x32x2048xbf16>) -> tensor<1x32x2048xbf16>
// CHECK-NEXT:     %m = torch.mul %s, %g : (tensor<1x32x2048xbf16>, tensor<1x32x2048xbf16>) -> tensor<1x32x2048xbf16>
// CHECK-NEXT:     %f = torch.to %x : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xf32>
// CHECK-NEXT:     %fr = torch.rsqrt %f : (tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
// CHECK-NEXT:     %fe = torch.exp %fr : (tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
// CHECK-NEXT:     %ft = torch.tanh %fe : (tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
// CHECK-NEXT:     %fa = torch.add_scalar %ft {value = 1.000000e+00 : f64} : (tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
// CHECK-NEXT:     %fm = torch.mul_scalar %fa {value = 5.000000e-01 : f64} : (tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
// CHECK-NEXT:     %fs = torch.sub %fm, %row {alpha = 2.000000e+00 : f64} : (tensor<1x32x1024xf32>, tensor<1024xf32>) -> tensor<1x32x1024xf32>
// CHECK-NEXT:     %fd = torch.div %fs, %f : (tensor<1x32x1024xf32>, tensor<1x32x1024xf32>) -> tensor<1x32x1024xf32>
// CHECK-NEXT:     %mixed = torch.mul %fd, %x : (tensor<1x32x1024xf32>, tensor<1x32x1024xbf16>) -> tensor<1x32x1024xf32>
// CHECK-NEXT:     %kt = torch.transpose %qt {dims = array<i64: 2, 3>} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x128x32xbf16>
// CHECK-NEXT:     %mm = torch.matmul %qt, %kt : (tensor<1x16x32x128xbf16>, tensor<1x16x128x32xbf16>) -> tensor<1x16x32x32xbf16>
// CHECK-NEXT:     %sg = torch.sigmoid %x : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %rl = torch.relu %sg : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %pw = torch.pow_scalar %rl {value = 3.000000e+00 : f64} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %mx = torch.maximum %pw, %x : (tensor<1x32x1024xbf16>, tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %mn = torch.minimum %mx, %w : (tensor<1x32x1024xbf16>, tensor<1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %sm = torch.softmax %mn {dim = 2 : i64} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %av = torch.mean %sm {dims = array<i64: 2>, keepdim = true} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1xbf16>
// CHECK-NEXT:     %al = torch.mean %sm {dims = array<i64: 1, 2>, keepdim = false} : (tensor<1x32x1024xbf16>) -> tensor<1xbf16>
// CHECK-NEXT:     %ab = torch.abs %sm : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %cl = torch.clamp %ab {min = -1.000000e+00 : f64, max = 1.000000e+00 : f64} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %ch = torch.clamp %cl {max = 5.000000e-01 : f64} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %su = torch.sum %ch {dims = array<i64: 1, 2>, keepdim = false} : (tensor<1x32x1024xbf16>) -> tensor<1xbf16>
// CHECK-NEXT:     %am = torch.amax %ch {dims = array<i64: 2>, keepdim = true} : (tensor<1x32x1024xbf16>) -> tensor<1x32x1xbf16>
// CHECK-NEXT:     %sq = torch.sqrt %ab : (tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %ex = torch.expand %row : (tensor<1024xf32>) -> tensor<1x32x1024xf32>
// CHECK-NEXT:     %e = torch.embedding %table, %ids : (tensor<100x1024xbf16>, tensor<1x32xi64>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     %r = torch.add %x, %e : (tensor<1x32x1024xbf16>, tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
// CHECK-NEXT:     func.return %r : tensor<1x32x1024xbf16>
// CHECK-NEXT:   }
// CHECK-NEXT: }
