builtin.module attributes {emmy.model = "Qwen/Qwen3-Embedding-0.6B", emmy.layer = 0 : i64, emmy.tokens = 32 : i64, emmy.target = "sm_90"} {
  func.func @layer0(%hidden_states: tensor<1x32x1024xbf16> {emmy.name = "hidden_states", emmy.role = "input"}, %input_layernorm.weight: tensor<1024xbf16> {emmy.name = "input_layernorm.weight", emmy.role = "param"}, %self_attn.q_proj.weight: tensor<2048x1024xbf16> {emmy.name = "self_attn.q_proj.weight", emmy.role = "param"}, %self_attn.k_proj.weight: tensor<1024x1024xbf16> {emmy.name = "self_attn.k_proj.weight", emmy.role = "param"}, %self_attn.v_proj.weight: tensor<1024x1024xbf16> {emmy.name = "self_attn.v_proj.weight", emmy.role = "param"}) -> (tensor<1x32x2048xbf16>, tensor<1x32x1024xbf16>, tensor<1x32x1024xbf16>) {
    %input_layernorm = torch.rms_norm %hidden_states, %input_layernorm.weight {eps = 1.000000e-06 : f64} : (tensor<1x32x1024xbf16>, tensor<1024xbf16>) -> tensor<1x32x1024xbf16>
    %q_proj = torch.linear %input_layernorm, %self_attn.q_proj.weight : (tensor<1x32x1024xbf16>, tensor<2048x1024xbf16>) -> tensor<1x32x2048xbf16>
    %k_proj = torch.linear %input_layernorm, %self_attn.k_proj.weight : (tensor<1x32x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<1x32x1024xbf16>
    %v_proj = torch.linear %input_layernorm, %self_attn.v_proj.weight : (tensor<1x32x1024xbf16>, tensor<1024x1024xbf16>) -> tensor<1x32x1024xbf16>
    func.return %q_proj, %k_proj, %v_proj : tensor<1x32x2048xbf16>, tensor<1x32x1024xbf16>, tensor<1x32x1024xbf16>
  }
}
