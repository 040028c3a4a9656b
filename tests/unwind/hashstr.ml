(* tests/unwind/hashstr.ml — symbol-table style code: Hashtbl with string
   keys (caml_hash, caml_string_equal: noalloc externals called on the C
   stack), an array of boxed records updated in place (caml_modify), and
   String.equal / compare in a hot loop.
   Usage: hashstr.exe [SCALE] *)

type entry = { name : string; mutable uses : int; mutable last : string }

let scale = if Array.length Sys.argv > 1 then float_of_string Sys.argv.(1) else 1.0
let rounds = max 1 (int_of_float (scale *. 700.))

let names = Array.init 5000 (fun i -> Printf.sprintf "identifier_%d_%s" i (String.make (i mod 17) 'x'))

let[@inline never] intern tbl s =
  match Hashtbl.find_opt tbl s with
  | Some e -> e.uses <- e.uses + 1; e
  | None -> let e = { name = s; uses = 1; last = s } in Hashtbl.replace tbl s e; e

let[@inline never] shuffle_refs (slots : entry array) e i =
  (* caml_modify: a boxed value stored into a (major-heap) array *)
  for k = 0 to 15 do slots.((i + k * 256) mod Array.length slots) <- e done;
  e.last <- names.((i * 7) mod Array.length names)

let[@inline never] count_equal (slots : entry array) s =
  let n = ref 0 in
  Array.iter (fun e -> if String.equal e.name s then incr n) slots;
  !n

let () =
  let tbl = Hashtbl.create 1024 in
  let slots = Array.make 4096 { name = ""; uses = 0; last = "" } in
  let acc = ref 0 in
  for r = 1 to rounds do
    Array.iteri (fun i s ->
        let e = intern tbl s in
        shuffle_refs slots e (i + r);
        if i mod 97 = 0 then acc := !acc + count_equal slots s)
      names
  done;
  Printf.printf "hashstr: %d %d\n" (Hashtbl.length tbl) (!acc land 0xffff)
