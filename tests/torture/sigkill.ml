(* sigkill.ml — runs until the checker kills it with SIGKILL: the profile
   cannot be completed, and `flamme report` must say so. *)
let () =
  let acc = ref 0 in
  while true do acc := (!acc * 7 + 1) land 0xffff; if !acc = -1 then print_int !acc done
