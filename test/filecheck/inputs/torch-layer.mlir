builtin.module attributes {emmy.model = "Qwen/Qwen3-Embedding-0.6B", emmy.layer = 0 : i64, emmy.tokens = 32 : i64, emmy.target = "sm_90"} {
  func.func @layer0(%hidden_states: tensor<1x32x1024xbf16> {emmy.name = "hidden_states", emmy.role = "input"}, %cos: tensor<1x32x128xbf16> {emmy.name = "cos", emmy.role = "input"}, %sin: tensor<1x32x128xbf16> {emmy.name = "sin", emmy.role = "input"}, %self_attn.q_proj.weight: tensor<2048x1024xbf16> {emmy.name = "self_attn.q_proj.weight", emmy.role = "param"}, %self_attn.k_proj.weight: tensor<1024x1024xbf16> {emmy.name = "self_attn.k_proj.weight", emmy.role = "param"}, %self_attn.v_proj.weight: tensor<1024x1024xbf16> {emmy.name = "self_attn.v_proj.weight", emmy.role = "param"}, %self_attn.o_proj.weight: tensor<1024x2048xbf16> {emmy.name = "self_attn.o_proj.weight", emmy.role = "param"}, %self_attn.q_norm.weight: tensor<128xbf16> {emmy.name = "self_attn.q_norm.weight", emmy.role = "param"}, %self_attn.k_norm.weight: tensor<128xbf16> {emmy.name = "self_attn.k_norm.weight", emmy.role = "param"}, %mlp.gate_proj.weight: tensor<3072x1024xbf16> {emmy.name = "mlp.gate_proj.weight", emmy.role = "param"}, %mlp.up_proj.weight: tensor<3072x1024xbf16> {emmy.name = "mlp.up_proj.weight", emmy.role = "param"}, %mlp.down_proj.weight: tensor<1024x3072xbf16> {emmy.name = "mlp.down_proj.weight", emmy.role = "param"}, %input_layernorm.weight: tensor<1024xbf16> {emmy.name = "input_layernorm.weight", emmy.role = "param"}, %post_attention_layernorm.weight: tensor<1024xbf16> {emmy.name = "post_attention_layernorm.weight", emmy.role = "param"}) -> tensor<1x32x1024xbf16> {
    %input_layernorm = torch.rms_norm %hidden_states, %input_layernorm.weight {eps = 1.000000e-06 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xbf16>) -> tensor<1x32x1024xbf16>
    %q_proj = torch.linear %input_layernorm, %self_attn.q_proj.weight : (tensor<1x32x1024xbf16>, tensor<2048x1024xbf16>) -> tensor<1x32x2048xbf16>
    %view = torch.view %q_proj : (tensor<1x32x2048xbf16>) -> tensor<1x32x16x128xbf16>
    %q_norm = torch.rms_norm %view, %self_attn.q_norm.weight {eps = 1.000000e-06 : f64} : (tensor<1x32x16x128xbf16>, tensor<128xbf16>) -> tensor<1x32x16x128xbf16>
    %transpose = torch.transpose %q_norm {dims = array<i64: 1, 2>} : (tensor<1x32x16x128xbf16>) -> tensor<1x16x32x128xbf16>
    %k_proj = torch.linear %input_layernorm, %self_attn.k_proj.weight : (tensor<1x32x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<1x32x1024xbf16>
    %view_1 = torch.view %k_proj : (tensor<1x32x1024xbf16>) -> tensor<1x32x8x128xbf16>
    %k_norm = torch.rms_norm %view_1, %self_attn.k_norm.weight {eps = 1.000000e-06 : f64} : (tensor<1x32x8x128xbf16>, tensor<128xbf16>) -> tensor<1x32x8x128xbf16>
    %transpose_1 = torch.transpose %k_norm {dims = array<i64: 1, 2>} : (tensor<1x32x8x128xbf16>) -> tensor<1x8x32x128xbf16>
    %v_proj = torch.linear %input_layernorm, %self_attn.v_proj.weight : (tensor<1x32x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<1x32x1024xbf16>
    %view_2 = torch.view %v_proj : (tensor<1x32x1024xbf16>) -> tensor<1x32x8x128xbf16>
    %transpose_2 = torch.transpose %view_2 {dims = array<i64: 1, 2>} : (tensor<1x32x8x128xbf16>) -> tensor<1x8x32x128xbf16>
    %view_3 = torch.view %cos : (tensor<1x32x128xbf16>) -> tensor<1x1x32x128xbf16>
    %view_4 = torch.view %sin : (tensor<1x32x128xbf16>) -> tensor<1x1x32x128xbf16>
    %mul = torch.mul %transpose, %view_3 : (tensor<1x16x32x128xbf16>, tensor<1x1x32x128xbf16>) -> tensor<1x16x32x128xbf16>
    %slice = torch.slice %transpose {dim = 3 : i64, start = 0 : i64, end = 64 : i64, step = 1 : i64} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x32x64xbf16>
    %slice_1 = torch.slice %transpose {dim = 3 : i64, start = 64 : i64, end = 128 : i64, step = 1 : i64} : (tensor<1x16x32x128xbf16>) -> tensor<1x16x32x64xbf16>
    %neg = torch.neg %slice_1 : (tensor<1x16x32x64xbf16>) -> tensor<1x16x32x64xbf16>
    %cat = torch.cat %neg, %slice {dim = 3 : i64} : (tensor<1x16x32x64xbf16>, tensor<1x16x32x64xbf16>) -> tensor<1x16x32x128xbf16>
    %mul_1 = torch.mul %cat, %view_4 : (tensor<1x16x32x128xbf16>, tensor<1x1x32x128xbf16>) -> tensor<1x16x32x128xbf16>
    %add = torch.add %mul, %mul_1 : (tensor<1x16x32x128xbf16>, tensor<1x16x32x128xbf16>) -> tensor<1x16x32x128xbf16>
    %mul_2 = torch.mul %transpose_1, %view_3 : (tensor<1x8x32x128xbf16>, tensor<1x1x32x128xbf16>) -> tensor<1x8x32x128xbf16>
    %slice_2 = torch.slice %transpose_1 {dim = 3 : i64, start = 0 : i64, end = 64 : i64, step = 1 : i64} : (tensor<1x8x32x128xbf16>) -> tensor<1x8x32x64xbf16>
    %slice_3 = torch.slice %transpose_1 {dim = 3 : i64, start = 64 : i64, end = 128 : i64, step = 1 : i64} : (tensor<1x8x32x128xbf16>) -> tensor<1x8x32x64xbf16>
    %neg_1 = torch.neg %slice_3 : (tensor<1x8x32x64xbf16>) -> tensor<1x8x32x64xbf16>
    %cat_1 = torch.cat %neg_1, %slice_2 {dim = 3 : i64} : (tensor<1x8x32x64xbf16>, tensor<1x8x32x64xbf16>) -> tensor<1x8x32x128xbf16>
    %mul_3 = torch.mul %cat_1, %view_4 : (tensor<1x8x32x128xbf16>, tensor<1x1x32x128xbf16>) -> tensor<1x8x32x128xbf16>
    %add_1 = torch.add %mul_2, %mul_3 : (tensor<1x8x32x128xbf16>, tensor<1x8x32x128xbf16>) -> tensor<1x8x32x128xbf16>
    %attn = torch.scaled_dot_product_attention %add, %add_1, %transpose_2 {is_causal = true, scale = 0.088388347648318447 : f64, enable_gqa = true} : (tensor<1x16x32x128xbf16>, tensor<1x8x32x128xbf16>, tensor<1x8x32x128xbf16>) -> tensor<1x16x32x128xbf16>
    %transpose_3 = torch.transpose %attn {dims = array<i64: 1, 2>} : (tensor<1x16x32x128xbf16>) -> tensor<1x32x16x128xbf16>
    %view_5 = torch.view %transpose_3 : (tensor<1x32x16x128xbf16>) -> tensor<1x32x2048xbf16>
    %o_proj = torch.linear %view_5, %self_attn.o_proj.weight : (tensor<1x32x2048xbf16>, tensor<1024x2048xbf16>) -> tensor<1x32x1024xbf16>
    %add_2 = torch.add %hidden_states, %o_proj : (tensor<1x32x1024xbf16>, tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    %post_attention_layernorm = torch.rms_norm %add_2, %post_attention_layernorm.weight {eps = 1.000000e-06 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xbf16>) -> tensor<1x32x1024xbf16>
    %gate_proj = torch.linear %post_attention_layernorm, %mlp.gate_proj.weight : (tensor<1x32x1024xbf16>, tensor<3072x1024xbf16>) -> tensor<1x32x3072xbf16>
    %silu = torch.silu %gate_proj : (tensor<1x32x3072xbf16>) -> tensor<1x32x3072xbf16>
    %up_proj = torch.linear %post_attention_layernorm, %mlp.up_proj.weight : (tensor<1x32x1024xbf16>, tensor<3072x1024xbf16>) -> tensor<1x32x3072xbf16>
    %mul_4 = torch.mul %silu, %up_proj : (tensor<1x32x3072xbf16>, tensor<1x32x3072xbf16>) -> tensor<1x32x3072xbf16>
    %down_proj = torch.linear %mul_4, %mlp.down_proj.weight : (tensor<1x32x3072xbf16>, tensor<1024x3072xbf16>) -> tensor<1x32x1024xbf16>
    %add_3 = torch.add %add_2, %down_proj : (tensor<1x32x1024xbf16>, tensor<1x32x1024xbf16>) -> tensor<1x32x1024xbf16>
    func.return %add_3 : tensor<1x32x1024xbf16>
  }
}
