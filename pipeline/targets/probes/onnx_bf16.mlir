module {
  func.func @main_graph(%arg0: !torch.vtensor<[1,8,44],bf16>) -> !torch.vtensor<[1,2,40],bf16> attributes {torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 22 : si64, torch.onnx_meta.producer_name = "pytorch", torch.onnx_meta.producer_version = "2.13.0"} {
    %0 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<weight> : tensor<2x8x5xbf16>} : () -> !torch.vtensor<[2,8,5],bf16> 
    %1 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<bias> : tensor<2xbf16>} : () -> !torch.vtensor<[2],bf16> 
    %none = torch.constant.none
    %2 = torch.operator "onnx.Conv"(%arg0, %0, %1) {torch.onnx.dilations = [1 : si64], torch.onnx.group = 1 : si64, torch.onnx.kernel_shape = [5 : si64], torch.onnx.pads = [0 : si64, 0 : si64], torch.onnx.strides = [1 : si64]} : (!torch.vtensor<[1,8,44],bf16>, !torch.vtensor<[2,8,5],bf16>, !torch.vtensor<[2],bf16>) -> !torch.vtensor<[1,2,40],bf16> 
    return %2 : !torch.vtensor<[1,2,40],bf16>
  }
}

{-#
  dialect_resources: {
    builtin: {
      weight: "0x08000000073DDD3DB33C603D5F3CC63D0B3EBB3CB23D0D3E0C3EBFBDFABDA13D7EBDA8BDEA3DF3BCF4BDDEBCCF3DE6BC2FBD0C3E77BDB5BA07BEDCBD993DF53DD93B4C3D11BE0ABD2FBDD7BCD23D87BDCEBD1EBBCFBD84BD77BCC33D88BD523D29BBC5BDD73C80BD873DA5BDFDBD14BEEBBD163DCC3CDB3D22BDA1BC893C45BD553D703C18BE97BD8D3DEABDB1BD90BD02BE1EBE0D3D143C90BDE4BC763D7A3D99BD87BD",
      bias: "0x08000000A8BEC43E"
    }
  }
#-}

