module {
  func.func @main_graph(%arg0: !torch.vtensor<[1,8,44],f32>) -> !torch.vtensor<[1,2,40],f32> attributes {torch.onnx_meta.ir_version = 8 : si64, torch.onnx_meta.opset_version = 17 : si64, torch.onnx_meta.producer_name = "pytorch", torch.onnx_meta.producer_version = "2.13.0"} {
    %0 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<weight> : tensor<2x8x5xf32>} : () -> !torch.vtensor<[2,8,5],f32> 
    %1 = torch.operator "onnx.Constant"() {torch.onnx.value = dense_resource<bias> : tensor<2xf32>} : () -> !torch.vtensor<[2],f32> 
    %none = torch.constant.none
    %2 = torch.operator "onnx.Conv"(%arg0, %0, %1) {torch.onnx.dilations = [1 : si64], torch.onnx.group = 1 : si64, torch.onnx.kernel_shape = [5 : si64], torch.onnx.pads = [0 : si64, 0 : si64], torch.onnx.strides = [1 : si64]} : (!torch.vtensor<[1,8,44],f32>, !torch.vtensor<[2,8,5],f32>, !torch.vtensor<[2],f32>) -> !torch.vtensor<[1,2,40],f32> 
    return %2 : !torch.vtensor<[1,2,40],f32>
  }
}

{-#
  dialect_resources: {
    builtin: {
      weight: "0x08000000F4FB063D1525DD3DF020B33CBD855F3D2E215F3C2AC0C53DB0550B3E7646BB3C68BFB13DAA440D3E3BE60B3E6EF6BEBD1521FABDEBF8A03D0FBC7DBDCFC0A7BD11E6E93D2452F3BCD498F3BDCA69DEBCBC78CF3DEB4DE6BC37632FBDBD090C3EA2FB76BD8D3AB5BA9B8106BEA49FDBBD1855993D7B55F53DF16DD93BF4954B3DF56711BEB5B709BD99F82EBD1E2BD7BC03CAD13D077A87BDA40ECEBDD88C1DBB74D3CEBDA48983BD1E1D77BCE5D1C23DB35A88BDF886513DC3EF28BB8075C5BD3F44D73C3E7E80BD3719873DA3F5A4BDE6F0FCBD2E1C14BE05F1EABD0E3E163DE085CB3CFDC9DA3D469B21BD2ACCA0BC0666893CFA7745BD8548553D86BB6F3CAF6C18BED54697BD9C928C3D31A1E9BD6041B1BD1F3990BD527402BE8BE31DBE4BF60C3D554E143C53C38FBD79B9E3BC4ED6753DA08C793DCF1399BDAF7F87BD",
      bias: "0x0800000082CDA7BEAFF3C33E"
    }
  }
#-}

