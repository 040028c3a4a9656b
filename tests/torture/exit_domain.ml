(* exit_domain.ml — a non-main domain ends the program with exit 3 while the
   main domain is still working. *)
let[@inline never] spin () =
  let acc = ref 0 in
  while true do acc := (!acc + 1) land 0xffff; if !acc = -1 then print_int !acc done

let () =
  print_endline "start";
  let _d = Domain.spawn (fun () ->
    let acc = ref 0 in
    for i = 1 to 30_000_000 do acc := (!acc + i) land 0xffff done;
    print_endline "domain exits";
    exit 3) in
  spin ()
